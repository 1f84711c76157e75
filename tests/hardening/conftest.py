"""Fixtures for the hardening suite (helpers live in ``hardening_kit``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hardening_kit import Repo, make_repo


@pytest.fixture(autouse=True)
def _unconfined(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every benchmark here records its pid in a file outside the trees, and the tests
    look those pids up on the host: the sandbox forbids the one and renumbers the other
    (tests/test_sandbox.py tests the sandbox's own guards)."""
    monkeypatch.setenv("ASSAY_SANDBOX", "off")


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path)


@pytest.fixture
def repo_factory(tmp_path: Path) -> Callable[..., Repo]:
    counter = iter(range(1000))

    def factory(**kw: str) -> Repo:
        return make_repo(tmp_path / f"r{next(counter)}", **kw)  # type: ignore[arg-type]

    return factory
