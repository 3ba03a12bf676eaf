from django.apps import AppConfig
from django.db.models.signals import post_migrate


class Config(AppConfig):
    name = "lab.catalogue"
    label = "catalogue"

    def ready(self) -> None:
        post_migrate.connect(_load, sender=self)


def _load(**kwargs: object) -> None:
    """Keep the catalogue in step with the registry after every migrate (tests included)."""
    from lab.catalogue.sync import load_catalogue

    load_catalogue()
