from django.core.management.base import BaseCommand

from lab.catalogue.sync import load_catalogue


class Command(BaseCommand):
    help = "Load systems, baselines and workloads from the runners registry (idempotent)."

    def handle(self, *args: object, **options: object) -> None:
        entries, loaded = load_catalogue()
        self.stdout.write(f"catalogue: {entries} systems/baselines, {loaded} workloads")
