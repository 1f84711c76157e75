"""The command line as a user runs it: real subprocesses, narrow terminals, bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-c", "from assay.cli.app import main; main()"]


def cli(*args: str, columns: int = 40, cwd: Path | None = None
        ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm-256color"}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=env,
                          cwd=cwd)


@pytest.mark.parametrize("verb", ["status", "run", "log", "research", "finalize", "report"])
def test_an_error_naming_a_long_path_is_never_wrapped(tmp_path: Path, verb: str) -> None:
    missing = tmp_path / "a-rather-long-folder-name" / "that-does-not-exist" / "anywhere-at-all"
    r = cli(verb, "-C", str(missing), columns=40)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1, r.stderr
    assert str(missing / "assay.toml") in lines[0]  # the whole path on one line
    assert "no such file" in lines[0]


# Runs the CLI with some modules made unimportable, as on an install without an extra.
BLOCKED_CLI = """
import sys
blocked = set(sys.argv[1].split(","))
class Block:
    def find_spec(self, name, path=None, target=None):
        if name in blocked or name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
from assay.cli.app import main
sys.argv = ["assay", *sys.argv[2:]]
main()
"""


def blocked_cli(blocked: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "60"}
    return subprocess.run([sys.executable, "-c", BLOCKED_CLI, blocked, *args],
                          capture_output=True, text=True, timeout=300, env=env)


def test_every_command_is_registered() -> None:
    r = cli("--help", columns=200)
    assert r.returncode == 0, r.stderr
    for name in ("init", "run", "status", "log", "show", "export", "research", "finalize",
                 "report", "serve", "mcp", "stop"):
        assert f" {name} " in r.stdout, (name, r.stdout)


LOADED = """
import sys
sys.argv = ["assay", *sys.argv[1:]]
import assay.cli.app
print(",".join(m for m in ("assay.research", "assay.finalize", "assay.planning.plan",
                           "assay.cli.faces") if m in sys.modules))
"""


@pytest.mark.parametrize("argv, loaded", [
    (["status", "-C", "."], ""), (["--debug", "log"], ""),
    (["--help"], "assay.research,assay.finalize,assay.planning.plan,assay.cli.faces"),
    (["report", "--help"], "assay.research,assay.finalize,assay.planning.plan,assay.cli.faces"),
])
def test_a_core_verb_starts_without_loading_the_subsystems(argv: list[str], loaded: str) -> None:
    r = subprocess.run([sys.executable, "-c", LOADED, *argv], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == loaded


def test_a_command_that_fails_to_load_says_so_and_shows_its_traceback_under_debug() -> None:
    r = blocked_cli("assay.cli.research", "research", "-C", ".")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "the `research` command could not be loaded" in r.stderr
    assert "No module named 'assay.cli.research'" in r.stderr
    assert "assay --debug research" in r.stderr and "Traceback" not in r.stderr
    d = blocked_cli("assay.cli.research", "--debug", "research")
    assert d.returncode == 2 and "Traceback (most recent call last)" in d.stderr, d.stderr
    assert "could not be loaded" in d.stderr
    listed = blocked_cli("assay.cli.research", "--help")
    assert listed.returncode == 0 and "could not be loaded" in listed.stdout  # still listed


def _tiny(tmp_path: Path, extra: str) -> Path:
    from .conftest import CONFIG, make_repo

    config = CONFIG.format(python=sys.executable, slots=1, budget=2, pairs=2, extra=extra)
    return make_repo(tmp_path / "repo", {"bench.py": "print('METRIC speed=1')\n",
                                         "work.py": "WORK = 1000\nMEM_KB = 1\n",
                                         "assay.toml": config})


def test_sampler_gp_without_torch_names_the_extra_before_any_trial(tmp_path: Path) -> None:
    root = _tiny(tmp_path, '[proposer.sweep]\nsampler = "gp"\n')
    r = blocked_cli("torch", "run", "-C", str(root))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "pip install 'assay[gp]'" in r.stderr and 'sampler = "gp"' in r.stderr
    assert "Traceback" not in r.stderr
    journal = root / ".assay" / "journal.sqlite"
    if journal.exists():  # opened at the session's start, but no experiment was run
        import sqlite3

        con = sqlite3.connect(journal)
        try:
            assert con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0
        finally:
            con.close()


def test_report_serve_and_mcp_without_their_extra_say_what_to_install(tmp_path: Path) -> None:
    root = _tiny(tmp_path, "")
    for cmd, blocked in (("report", "plotly"), ("serve", "plotly"), ("mcp", "mcp")):
        r = blocked_cli(blocked, cmd, "-C", str(root))
        assert r.returncode == 2, (cmd, r.stdout + r.stderr)
        assert "pip install 'assay[faces]'" in r.stderr, (cmd, r.stderr)
        assert "Traceback" not in r.stderr
