from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def results_dir(settings, tmp_path):
    """Each test gets its own result store (run ids restart with every test database)."""
    settings.RESULTS_DIR = tmp_path / "results"
    return settings.RESULTS_DIR
