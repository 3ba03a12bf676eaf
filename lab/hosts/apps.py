from django.apps import AppConfig


class Config(AppConfig):
    name = "lab.hosts"
    label = "hosts"
    verbose_name = "GPU hosts"
