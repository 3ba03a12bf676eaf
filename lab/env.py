"""The one place that reads environment variables (settings import from here).

Every variable is documented in README.md ("Configuration"). Helpers fail loudly on values
they cannot parse instead of silently falling back.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


class ConfigError(RuntimeError):
    pass


def load_dotenv(path: Path) -> list[str]:
    """Set the variables of the ``.env`` file at ``path`` (``KEY=VALUE`` lines, as `make run`
    writes it and honcho reads it; ``#`` comments, also after an unquoted value, ``export``
    and quotes allowed) that the environment does not set already; returns their names. No
    file: nothing."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    set_here = []
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.removeprefix("export ").partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key.isidentifier():
            raise ConfigError(f"{path}, line {number}: expected KEY=VALUE")
        if value[:1] in ("'", '"'):  # up to its closing quote (a comment may follow)
            end = value.find(value[0], 1)
            if end < 0:
                raise ConfigError(f"{path}, line {number}: {key}'s value has no closing quote")
            value = value[1:end]
        else:  # a comment after an unquoted value (``KEY=value  # why``), as bash and honcho
            value = re.split(r"\s#", value, maxsplit=1)[0].rstrip()
        if key not in os.environ:
            os.environ[key] = value
            set_here.append(key)
    return set_here


def text(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value in (None, "") else value


def required(name: str, hint: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise ConfigError(f"environment variable {name} is not set: {hint}")
    return value


def flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value in (None, ""):
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={value!r}: expected one of 1/0, true/false, yes/no, on/off")


def integer(name: str, default: int, minimum: int = 0) -> int:
    value = os.environ.get(name)
    if value in (None, ""):
        return default
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r}: expected an integer") from None
    if number < minimum:
        raise ConfigError(f"{name}={number}: must be >= {minimum}")
    return number


def number(name: str, default: float, minimum: float = 0.0) -> float:
    value = os.environ.get(name)
    if value in (None, ""):
        return default
    try:
        parsed = float(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r}: expected a number") from None
    if parsed < minimum:
        raise ConfigError(f"{name}={parsed}: must be >= {minimum}")
    return parsed


def csv(name: str, default: str) -> list[str]:
    return [item.strip() for item in (text(name, default) or "").split(",") if item.strip()]


def path(name: str, default: Path) -> Path:
    return Path(text(name) or default).resolve()
