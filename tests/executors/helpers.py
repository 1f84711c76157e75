"""Shared fixtures' building blocks: a tiny target repository and a local Ray cluster."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from assay.testing.executors import KitRepo, make_kit_repo

# The kit's target lives in the package (assay.testing.executors); these names stay for
# the Ray and SkyPilot tests.
Repo = KitRepo
make_repo = make_kit_repo


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
           "RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "3",
           "RAY_health_check_initial_delay_ms": "0", "RAY_DEDUP_LOGS": "0"}


def _ray_bin() -> str:
    return str(Path(sys.executable).parent / "ray")


def descendants(pid: int) -> list[int]:
    import psutil

    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def kill_tree(pid: int) -> None:
    """Kill a node: its process group and every process below it (workers use own groups)."""
    pids = descendants(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)


@dataclass
class RayCluster:
    """A Ray cluster on 127.0.0.1 made of `ray start --block` processes we own."""

    temp_dir: Path
    port: int = field(default_factory=free_port)
    nodes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    ignore_sigint: bool = False  # as in a job put in the background with `&`

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _start(self, name: str, args: list[str], slots: int) -> None:
        cmd = [_ray_bin(), "start", "--block", "--node-ip-address", "127.0.0.1",
               "--num-cpus", str(slots), "--resources", json.dumps({"assay_slot": slots}),
               "--object-store-memory", str(80 * 1024 * 1024), "--disable-usage-stats", *args]
        with open(self.temp_dir / f"{name}.log", "wb") as log:
            ignore = ((lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
                      if self.ignore_sigint else None)
            self.nodes[name] = subprocess.Popen(cmd, start_new_session=True, stdout=log,
                                                stderr=subprocess.STDOUT,
                                                env={**os.environ, **RAY_ENV},
                                                preexec_fn=ignore)

    def start_head(self, slots: int = 1) -> None:
        self._start("head", ["--head", "--port", str(self.port), "--temp-dir",
                             str(self.temp_dir / "t"), "--include-dashboard", "false"], slots)

    def add_node(self, name: str, slots: int = 1) -> None:
        self._start(name, ["--address", self.address], slots)

    def wait_nodes(self, n: int, timeout: float = 90.0) -> None:
        import ray

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ray.is_initialized():
                alive = [x for x in ray.nodes() if x["Alive"]]
                if len(alive) >= n:
                    return
            time.sleep(0.3)
        raise TimeoutError(f"fewer than {n} Ray nodes after {timeout}s")

    def connect(self) -> None:
        import logging

        import ray

        deadline = time.monotonic() + 60
        while True:
            try:
                ray.init(address=self.address, logging_level=logging.WARNING,
                         log_to_driver=False, namespace="assay")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def ensure_connected(self) -> None:
        """Connect this process's Ray driver to this cluster (another test may have moved it)."""
        import ray

        if ray.is_initialized():
            current = ray.get_runtime_context().gcs_address
            if current.endswith(f":{self.port}"):
                return
            ray.shutdown()
        self.connect()

    def kill(self, name: str) -> None:
        proc = self.nodes.pop(name)
        kill_tree(proc.pid)
        proc.wait(timeout=10)

    def stop(self) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        for name in [n for n in self.nodes if n != "head"] + ["head"]:
            if name in self.nodes:
                self.kill(name)


@contextlib.contextmanager
def ray_cluster(workers: int = 1, ignore_sigint: bool = False) -> Iterator[RayCluster]:
    tmp = Path(tempfile.mkdtemp(prefix="aray"))
    cluster = RayCluster(tmp, ignore_sigint=ignore_sigint)
    try:
        cluster.start_head()
        for i in range(workers):
            cluster.add_node(f"w{i}")
        cluster.connect()
        cluster.wait_nodes(1 + workers)
        yield cluster
    finally:
        cluster.stop()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
