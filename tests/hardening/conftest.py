"""Fixtures for the hardening suite (helpers live in ``hardening_kit``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hardening_kit import Repo, make_repo


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path)


@pytest.fixture
def repo_factory(tmp_path: Path) -> Callable[..., Repo]:
    counter = iter(range(1000))

    def factory(**kw: str) -> Repo:
        return make_repo(tmp_path / f"r{next(counter)}", **kw)  # type: ignore[arg-type]

    return factory
