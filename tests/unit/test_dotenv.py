"""`make run` writes the portal's secret key to ``.env`` (honcho gives it to the portal's
processes); ``manage.py`` reads it too, so the commands the README and the start banner name
(``manage.py apitoken``, ``changepassword``) work in a second terminal."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.env import ConfigError, load_dotenv

ROOT = Path(__file__).resolve().parents[2]


def test_a_dotenv_sets_what_the_environment_does_not(tmp_path, monkeypatch):
    path = tmp_path / ".env"
    path.write_text(
        "# written by make run\n\nLAB_T_ONE=abc=def\nexport LAB_T_TWO='quoted value'\n"
        'LAB_T_THREE="x"\nLAB_T_KEPT=from-file\n'
    )
    for key in ("LAB_T_ONE", "LAB_T_TWO", "LAB_T_THREE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("LAB_T_KEPT", "from-environment")
    assert load_dotenv(path) == ["LAB_T_ONE", "LAB_T_TWO", "LAB_T_THREE"]
    assert os.environ["LAB_T_ONE"] == "abc=def"
    assert os.environ["LAB_T_TWO"] == "quoted value"
    assert os.environ["LAB_T_THREE"] == "x"
    assert os.environ["LAB_T_KEPT"] == "from-environment"  # the environment wins
    assert load_dotenv(tmp_path / "missing") == []


def test_a_comment_after_a_value_is_not_part_of_it(tmp_path, monkeypatch):
    path = tmp_path / ".env"
    path.write_text(
        "LAB_T_A=redis://x:6379/0  # the broker\nLAB_T_B='a # b' # why\nLAB_T_C=abc#def\nLAB_T_D=\n"
    )
    for key in ("LAB_T_A", "LAB_T_B", "LAB_T_C", "LAB_T_D"):
        monkeypatch.delenv(key, raising=False)
    load_dotenv(path)
    assert os.environ["LAB_T_A"] == "redis://x:6379/0"
    assert os.environ["LAB_T_B"] == "a # b"  # quoted: kept
    assert os.environ["LAB_T_C"] == "abc#def"  # no space before it: not a comment (bash)
    assert os.environ["LAB_T_D"] == ""
    path.write_text("LAB_T_E='open\n")
    with pytest.raises(ConfigError, match=r"line 1: LAB_T_E's value has no closing quote"):
        load_dotenv(path)


def test_a_line_that_is_not_key_value_is_named(tmp_path):
    path = tmp_path / ".env"
    path.write_text("LAB_T_OK=1\nthis is not a setting\n")
    with pytest.raises(ConfigError, match=r"\.env, line 2: expected KEY=VALUE"):
        load_dotenv(path)


def test_manage_py_reads_the_dotenv_beside_it(tmp_path):
    shutil.copy(ROOT / "manage.py", tmp_path / "manage.py")
    (tmp_path / ".env").write_text("DJANGO_SECRET_KEY=from-the-dotenv-file\n")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SECRET_KEY"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env["PYTHONPATH"] = str(ROOT)
    shown = subprocess.run(
        [sys.executable, str(tmp_path / "manage.py"), "shell", "-c",
         "from django.conf import settings; print(settings.SECRET_KEY)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip().splitlines()[-1] == "from-the-dotenv-file"
