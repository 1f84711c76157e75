"""process.py's crash guards: death with the parent, reaping by token, kill_all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from hardening_kit import alive, wait_dead, wait_for

from assay.bench import process
from assay.config.spec import EnvSpec

RUNNER = """
import sys, time
from pathlib import Path
from assay.bench import process
root = Path(sys.argv[1])
process.run(sys.argv[2], cwd=root, env={"PATH": "/usr/bin:/bin"}, timeout_s=60,
            stdout_path=root / "out", stderr_path=root / "err")
"""


def _start(tmp_path: Path, cmd: str) -> subprocess.Popen[bytes]:
    (tmp_path / ".assay").mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-c", RUNNER, str(tmp_path), cmd])


def test_the_direct_child_dies_with_the_orchestrator(tmp_path: Path) -> None:
    pidf = tmp_path / "pid"
    orch = _start(tmp_path, f"echo $$ > {pidf}; exec sleep 60")
    assert wait_for(lambda: pidf.exists() and pidf.read_text().strip(), 30)
    child = int(pidf.read_text())
    assert alive(child)
    orch.send_signal(signal.SIGKILL)
    orch.wait()
    assert wait_dead([child]) == []  # PR_SET_PDEATHSIG


def test_grandchildren_and_escapees_are_reaped_by_token(tmp_path: Path) -> None:
    pidf = tmp_path / "pids"
    orch = _start(tmp_path, f"(setsid sleep 60 & echo $! >> {pidf}); sleep 60 & "
                            f"echo $! >> {pidf}; wait")
    assert wait_for(lambda: pidf.exists() and len(pidf.read_text().split()) == 2, 30)
    pids = [int(p) for p in pidf.read_text().split()]
    orch.send_signal(signal.SIGKILL)
    orch.wait()
    time.sleep(0.2)
    assert all(alive(p) for p in pids)  # nothing else would have killed them
    reg = tmp_path / ".assay" / "procs"
    assert list(reg.glob("*.json"))
    killed = process.reap(reg)
    assert set(pids) <= set(killed)
    assert wait_dead(pids) == []
    assert not list(reg.glob("*.json"))
    assert process.reap(reg) == []  # nothing left: idempotent


def test_kill_all_stops_every_running_group(tmp_path: Path) -> None:
    done: list[process.ProcResult] = []

    def go() -> None:
        done.append(process.run("sleep 60", cwd=tmp_path, env=process.scrubbed_env(EnvSpec()),
                                timeout_s=60, stdout_path=tmp_path / "o",
                                stderr_path=tmp_path / "e"))

    t = threading.Thread(target=go)
    t.start()
    assert wait_for(lambda: bool(process._LIVE), 10)
    assert process.kill_all() >= 1
    t.join(10)
    assert done and done[0].exit_code != 0 and not process._LIVE


def test_the_token_is_in_the_child_environment_only(tmp_path: Path) -> None:
    r = process.run("env", cwd=tmp_path, env={"PATH": os.defpath}, timeout_s=10,
                    stdout_path=tmp_path / "o", stderr_path=tmp_path / "e")
    assert process.TOKEN_VAR in r.stdout
    assert process.TOKEN_VAR not in os.environ
