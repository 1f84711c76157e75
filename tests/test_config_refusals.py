"""Bad input to `assay run` is refused with exit 2 before anything is written.

Each case runs the real CLI on a real repository and checks that no journal, no `.assay`
folder and no run branch exist afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import TinyFactory, git

CLI = [sys.executable, "-c", "from assay.cli.app import main; main()"]


def _run_cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([*CLI, "run", "-C", str(root), *args], capture_output=True,
                          text=True, timeout=120, env=env)


def _edit(root: Path, old: str, new: str) -> None:
    cfg = root / "assay.toml"
    text = cfg.read_text()
    assert old in text
    cfg.write_text(text.replace(old, new, 1))
    git(root, "commit", "-qam", "config")


def _assert_refused(root: Path, r: subprocess.CompletedProcess[str], *words: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    for word in words:
        assert word in r.stderr, r.stderr
    assert not (root / ".assay").exists()
    assert git(root, "branch", "--list", "assay/*").strip() == ""


@pytest.mark.parametrize("old,new,words", [
    ("[metric]", '[target]\nname = "r/t ü"\n\n[metric]', ["assay.toml:2", "[target.name]",
                                                          "a space"]),
    ('editable = ["work.py", "src/**/*.py"]',
     'editable = ["work.py", "src/**/*.py"]\nprotected = ["bench.py", "src/**"]',
     ["[scope.editable]", "'src/**/*.py' lies inside the protected 'src/**'"]),
    ("budget = 1", "budget = 99999999999999999999", ["[run.budget]", "out of range"]),
    ("[decision]", "[env]\nallow = 'PATH'\n\n[decision]", ["[env.allow]", "a list"]),
], ids=["name", "overlap", "budget", "allow"])
def test_a_bad_config_is_refused_before_anything_is_written(
        tiny_target: TinyFactory, old: str, new: str, words: list[str]) -> None:
    root = tiny_target(budget=1)
    if "protected" in new:
        _edit(root, 'protected = ["bench.py"]\n', "")
    _edit(root, old, new)
    _assert_refused(root, _run_cli(root), *words)


@pytest.mark.parametrize("args,words", [
    (["--name", "bad name~^:"], ["--name", "a space", "'~'"]),
    (["--name", "a..b"], ["--name", "'..'"]),
    (["--budget", "99999999999999999999"], ["--budget"]),
], ids=["name", "dots", "budget"])
def test_a_bad_option_is_refused_before_anything_is_written(
        tiny_target: TinyFactory, args: list[str], words: list[str]) -> None:
    root = tiny_target(budget=1)
    _assert_refused(root, _run_cli(root, *args), *words)
