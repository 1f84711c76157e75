from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from .helpers import RAY_ENV, RayCluster, ray_cluster


@pytest.fixture(scope="package", autouse=True)
def _ray_env() -> Iterator[None]:
    """Private Ray clusters: no usage stats, no token from home, fast health checks."""
    saved = {k: os.environ.get(k) for k in RAY_ENV}
    os.environ.update(RAY_ENV)
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(autouse=True)
def _unconfined(monkeypatch: pytest.MonkeyPatch) -> None:
    """The conformance kit's benchmark leaves marks of when it ran outside the trees, and
    its process ids are read from outside: the sandbox forbids the one and hides the other
    (tests/test_sandbox.py tests the sandbox)."""
    monkeypatch.setenv("ASSAY_SANDBOX", "off")


@pytest.fixture(scope="package")
def ray2() -> Iterator[RayCluster]:
    """A two-node local Ray cluster (one benchmark slot per node), shared by this package."""
    pytest.importorskip("ray")
    with ray_cluster(workers=1) as cluster:
        yield cluster


@pytest.fixture
def ray_connected(ray2: RayCluster) -> RayCluster:
    ray2.ensure_connected()
    return ray2
