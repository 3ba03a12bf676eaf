from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from lab.accounts.models import ApiToken


class Command(BaseCommand):
    help = (
        "Print a new API token for USERNAME (the user is created, without a password, if missing)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")

    def handle(self, *args: object, username: str, **options: object) -> None:
        user, created = get_user_model().objects.get_or_create(username=username)
        if created:
            user.set_unusable_password()
            user.save()
            self.stderr.write(f"created user {username} (API only: no password)")
        self.stdout.write(ApiToken.issue(user))
