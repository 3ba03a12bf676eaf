from django.apps import AppConfig


class Config(AppConfig):
    name = "lab.experiments"
    label = "experiments"
