from django.apps import AppConfig


class Config(AppConfig):
    name = "lab.runs"
    label = "runs"
