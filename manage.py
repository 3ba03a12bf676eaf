#!/usr/bin/env python
"""Django's command-line utility for the lab portal."""

import os
import sys
from pathlib import Path


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lab.settings.base")
    from lab.env import load_dotenv

    # what `make run` wrote (the secret key, ...), as honcho gives it to the portal's processes
    load_dotenv(Path(__file__).resolve().parent / ".env")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
