"""The first administrator is created safely: no default password."""

from __future__ import annotations

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db


def test_it_generates_and_prints_a_password_once_when_none_is_given(settings, capsys):
    settings.LAB_ADMIN_PASSWORD = None
    call_command("ensure_admin")
    out = capsys.readouterr().out
    password = out.split("with password: ")[1].split()[0]
    assert len(password) >= 16
    assert authenticate(username="admin", password=password) is not None
    call_command("ensure_admin")
    assert "already exists" in capsys.readouterr().out


def test_it_uses_the_password_from_the_environment(settings, capsys):
    settings.LAB_ADMIN_USER, settings.LAB_ADMIN_PASSWORD = "boss", "a-perfectly-fine-passphrase"
    call_command("ensure_admin")
    assert "a-perfectly-fine-passphrase" not in capsys.readouterr().out
    assert authenticate(username="boss", password="a-perfectly-fine-passphrase").is_superuser


def test_it_refuses_a_weak_password_from_the_environment(settings):
    settings.LAB_ADMIN_PASSWORD = "password"
    with pytest.raises(CommandError, match="LAB_ADMIN_PASSWORD"):
        call_command("ensure_admin")
    assert not get_user_model().objects.exists()
