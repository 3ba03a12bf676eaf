from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.integration.stack import PostgresServer, RedisServer, Stack, start_stack


@pytest.fixture(scope="session")
def embedded_stack():
    """The default of `make run`: SQLite and the filesystem broker, no servers."""
    root = Path(tempfile.mkdtemp(prefix="lab-stack-"))
    stack = start_stack(root)
    yield stack
    stack.close()


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(tmp_path)
    yield server
    server.close()


@pytest.fixture
def postgres_server():
    server = PostgresServer()
    yield server
    server.close()


@pytest.fixture
def fresh_stack(tmp_path) -> Stack:
    """Build your own stack in a test (and have it closed afterwards)."""
    stacks: list[Stack] = []

    def make(**env: str) -> Stack:
        stack = start_stack(tmp_path / f"stack{len(stacks)}", **env)
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        stack.close()
