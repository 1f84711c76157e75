"""The command line as a user runs it: real subprocesses, narrow terminals, bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-c", "from assay.cli import main; main()"]


def cli(*args: str, columns: int = 40, cwd: Path | None = None
        ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm-256color"}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=env,
                          cwd=cwd)


def test_an_error_naming_a_long_path_is_never_wrapped(tmp_path: Path) -> None:
    missing = tmp_path / "a-rather-long-folder-name" / "that-does-not-exist" / "anywhere-at-all"
    r = cli("status", "-C", str(missing), columns=40)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1, r.stderr
    assert str(missing / "assay.toml") in lines[0]  # the whole path on one line
    assert "no such file" in lines[0]
