from django.apps import AppConfig


class Config(AppConfig):
    name = "lab.results"
    label = "results"
