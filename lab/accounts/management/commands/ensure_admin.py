"""Create the first administrator safely: no default password, ever.

The password comes from LAB_ADMIN_PASSWORD when set; otherwise a random one is generated and
printed once (it is not stored anywhere in clear text). Does nothing when a superuser exists.
"""

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Create the first superuser if there is none (password from env or printed once)."

    def handle(self, *args: object, **options: object) -> None:
        users = get_user_model().objects
        if users.filter(is_superuser=True).exists():
            self.stdout.write(
                "admin: a superuser already exists (reset with `manage.py changepassword USERNAME`)"
            )
            return
        username = settings.LAB_ADMIN_USER
        password = settings.LAB_ADMIN_PASSWORD
        generated = password is None
        if generated:
            password = secrets.token_urlsafe(12)
        else:
            try:
                validate_password(password)
            except ValidationError as err:
                raise CommandError(f"LAB_ADMIN_PASSWORD: {' '.join(err.messages)}") from None
        users.create_superuser(username=username, email="", password=password)
        if generated:
            self.stdout.write(
                self.style.WARNING(
                    f"admin: created user '{username}' with password: {password}\n"
                    "       (shown once; change it with `manage.py changepassword "
                    f"{username}`)"
                )
            )
        else:
            self.stdout.write(f"admin: created user '{username}' with LAB_ADMIN_PASSWORD")
