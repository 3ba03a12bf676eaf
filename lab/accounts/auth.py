"""Token authentication for the JSON API (``Authorization: Token <token>``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from lab.accounts.models import ApiToken, digest

View = Callable[..., HttpResponse]


def user_from_token(request: HttpRequest) -> Any | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme != "Token" or not token.strip():
        return None
    found = ApiToken.objects.select_related("user").filter(key_digest=digest(token.strip()))
    api_token = found.first()
    if api_token is None or not api_token.user.is_active:
        return None
    ApiToken.objects.filter(pk=api_token.pk).update(last_used_at=timezone.now())
    return api_token.user


def token_required(view: View) -> View:
    """API views: a valid token or 401. Token requests carry no cookies, so no CSRF risk."""

    @login_not_required
    @csrf_exempt
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        user = user_from_token(request)
        if user is None:
            return JsonResponse(
                {
                    "error": "authentication required: send 'Authorization: Token <token>' "
                    "(create one with `python manage.py apitoken USERNAME`)"
                },
                status=401,
            )
        request.user = user
        return view(request, *args, **kwargs)

    return wrapper


def session_or_token(view: View) -> View:
    """Files that scripts fetch too (figures, CSV): a session or an API token."""

    @login_not_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            user = user_from_token(request)
            if user is None:
                return redirect_to_login(request.get_full_path())
            request.user = user
        return view(request, *args, **kwargs)

    return wrapper
