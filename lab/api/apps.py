from django.apps import AppConfig


class Config(AppConfig):
    name = "lab.api"
    label = "api"
