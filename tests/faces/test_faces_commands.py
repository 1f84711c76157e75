"""The CLI verbs: `python -m assay` lists them; `assay stop` stops a live run."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from assay import api
from assay.faces import data
from assay.loop.progress import Summary

from .conftest import Scripted


def assay(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "assay", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_python_m_assay_lists_the_verbs() -> None:
    proc = assay("--help")
    assert proc.returncode == 0, proc.stderr
    for verb in ("report", "serve", "mcp", "stop"):
        assert verb in proc.stdout
    serve_help = assay("serve", "--help").stdout
    assert "--host" in serve_help and "127.0.0.1" in serve_help and "8765" in serve_help


def test_stop_without_a_run(bare_target: Path) -> None:
    proc = assay("stop", "--root", str(bare_target))
    assert proc.returncode == 0, proc.stderr
    assert "no run holds the lock" in proc.stdout
    assert (bare_target / ".assay" / "stop").exists()


def test_report_needs_a_config(tmp_path: Path) -> None:
    proc = assay("report", "-C", str(tmp_path))
    assert proc.returncode == 2 and "assay.toml" in proc.stderr


def test_stop_stops_a_running_loop(bare_target: Path) -> None:
    root = bare_target
    plan = [{"params": {"SIZE": s}, "hypothesis": f"SIZE {s}", "proposer": "sweep"}
            for s in (2, 3, 5, 6, 9, 10, 11, 12, 14, 15, 17, 18, 19, 20, 21, 22, 23, 24)]
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["summary"] = api.run(root, budget=len(plan),
                                        proposer_obj=Scripted(plan))
        except BaseException as exc:  # reported below
            result["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    lock = root / ".assay" / "run.lock"
    deadline = time.monotonic() + 60
    target = api.load(root)

    def started() -> bool:
        journal = data.open_readonly(target)  # None while the run creates it
        if journal is None:
            return False
        try:
            return bool(journal.experiments())
        finally:
            journal.close()

    while not (lock.exists() and started()):
        assert time.monotonic() < deadline, "the run did not start"
        assert worker.is_alive(), result
        time.sleep(0.05)
    proc = assay("stop", "--root", str(root))
    assert proc.returncode == 0, proc.stderr
    assert "will stop" in proc.stdout
    worker.join(timeout=60)
    assert not worker.is_alive(), "the run did not stop"
    assert "error" not in result, result
    summary: Summary = result["summary"]
    assert "stop was requested" in summary.stopped
    assert len(api.log(root)) < len(plan)
    assert not lock.exists()
