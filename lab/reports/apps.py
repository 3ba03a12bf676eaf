from django.apps import AppConfig


class Config(AppConfig):
    name = "lab.reports"
    label = "reports"
