"""Shared pytest fixtures (append only; factories live in tests/factories.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_run_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test (and every CLI subprocess it starts) records runs into its own temporary store,
    never into the user's data dir: ``hetsched run`` records to the run store by default."""
    path = tmp_path / "hetsched-store" / "runs.sqlite"
    monkeypatch.setenv("HETSCHED_STORE", str(path))
    return path
