from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_binary
from tests.integration.stack import start_stack
from tests.integration.test_claims_stack import LEDGER

# Chromium as root in a closed network: no sandbox, and no background calls home.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def chromium():
    executable = require_binary("chromium", "/usr/bin/chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def portal():
    root = Path(tempfile.mkdtemp(prefix="lab-browser-"))
    ledger = root / "ledger.yaml"  # two quick claims, so "Check now" ends in seconds
    ledger.write_text(yaml.safe_dump([LEDGER[0], LEDGER[2]]))
    stack = start_stack(root, LAB_CLAIMS_LEDGER=str(ledger))
    yield stack
    stack.close()


@pytest.fixture
def page(chromium, portal):
    context = chromium.new_context()
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


def login(page, portal) -> None:
    page.goto(portal.url + "/")
    assert "/accounts/login/" in page.url
    page.fill("#id_username", "admin")
    page.fill("#id_password", portal.admin_password)
    page.click("button[type=submit]")
    page.wait_for_url(portal.url + "/")
