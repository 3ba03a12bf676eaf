from django.apps import AppConfig


class Config(AppConfig):
    name = "lab.accounts"
    label = "accounts"
