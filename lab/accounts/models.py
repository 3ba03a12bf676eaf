"""API tokens. Only a SHA-256 digest is stored; the token itself is shown once."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ApiToken(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    key_digest = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8, help_text="first characters, to tell tokens apart")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.user} {self.prefix}…"

    @classmethod
    def issue(cls, user: models.Model) -> str:
        """Create a token for ``user`` and return its clear text (not stored)."""
        token = secrets.token_urlsafe(32)
        cls.objects.create(user=user, key_digest=digest(token), prefix=token[:8])
        return token
