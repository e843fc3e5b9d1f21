"""Fixtures for the tests of the Python training helper: a clean environment, a fake head, a worker's env."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

from fake_head import PYTHON_DIR, RUN_ID, RUN_TOKEN, WORKER_ENV, FakeHead, running_head

sys.path.insert(0, str(PYTHON_DIR))

import torus_train  # noqa: E402


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No worker variables from the surrounding shell, and a fresh step counter, in every test."""
    for name in WORKER_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(torus_train, "_last_step", 0)


@pytest.fixture
def fake_head() -> Iterator[FakeHead]:
    with running_head() as head:
        yield head


@pytest.fixture
def worker_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake_head: FakeHead) -> Path:
    """The environment of rank 1 of 2 in attempt 2 of a run reporting to fake_head; returns the storage path."""
    storage = tmp_path / "storage" / "my-run"
    storage.mkdir(parents=True)
    values = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "NODE_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
        "TORUS_RUN_ID": RUN_ID,
        "TORUS_RUN_NAME": "my-run",
        "TORUS_ATTEMPT": "2",
        "TORUS_RANK": "1",
        "TORUS_WORLD_SIZE": "2",
        "TORUS_LOCAL_RANK": "1",
        "TORUS_STORAGE_PATH": str(storage),
        "TORUS_CHECKPOINT_DIR": "",
        "TORUS_REPORT_URL": fake_head.url,
        "TORUS_RUN_TOKEN": RUN_TOKEN,
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torus_train, "REPORT_BACKOFF_S", 0.01)
    return storage
