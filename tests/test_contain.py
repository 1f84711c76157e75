"""The gate before a run, the unconfined marks, the agent's sandbox and the keys, each
through a real `assay run` (or a real process) on a real target."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from assay import api
from assay.bench import contain
from assay.cli.app import app
from assay.errors import ExecutorError

from .conftest import TinyFactory

# An agent that halves the work in its checkout, and also tries to change the user's
# checkout (the target's root, given as its argument) behind assay's back.
AGENT = textwrap.dedent("""\
    import pathlib, sys
    work = pathlib.Path("work.py")
    text = work.read_text()
    first = text.splitlines()[0]
    work.write_text(text.replace(first, "WORK = 100000"))
    for name in ("README.md", "work.py"):
        try:
            with open(pathlib.Path(sys.argv[1]) / name, "a") as fh:
                fh.write("# the agent was here\\n")
        except OSError as exc:
            print("refused:", exc)
    print("HYPOTHESIS: half the work")
    """)


def _agent_target(tiny_target: TinyFactory, tmp_path: Path) -> Path:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    root = tmp_path / "repo"
    extra = (f"[proposer.agent]\ncommand = '''{sys.executable} {script} {root}'''\n"
             "timeout_s = 120\n")
    made = tiny_target(work=200_000, budget=1, pairs=2, extra=extra)
    assert made == root
    return root


def test_without_a_sandbox_an_agent_run_is_refused_saying_why(
        tiny_target: TinyFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _agent_target(tiny_target, tmp_path)
    monkeypatch.setenv("ASSAY_SANDBOX", "off")
    r = CliRunner().invoke(app, ["run", "--root", str(root), "--proposer", "agent"])
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.split())
    assert "sandbox" in text and "--unconfined" in text and "ASSAY_SANDBOX=off" in text
    assert "# the agent was here" not in (root / "README.md").read_text()


def test_an_unconfined_run_marks_every_experiment(
        tiny_target: TinyFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _agent_target(tiny_target, tmp_path)
    monkeypatch.setenv("ASSAY_SANDBOX", "off")
    r = CliRunner().invoke(app, ["run", "--root", str(root), "--proposer", "agent",
                                 "--unconfined"])
    assert r.exit_code == 0, r.output
    assert "unconfined" in r.output
    [exp] = api.log(root)
    assert exp["meta"]["unconfined"] is True
    log = CliRunner().invoke(app, ["log", "-C", str(root)])
    assert "(unconfined)" in log.output
    status = CliRunner().invoke(app, ["status", "-C", str(root)])
    assert status.output.startswith("unconfined:"), status.output
    assert api.status(root)["unconfined"] is True


def test_a_sweep_without_a_sandbox_warns_once(
        tiny_target: TinyFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tiny_target(budget=2, pairs=2)
    monkeypatch.setenv("ASSAY_SANDBOX", "off")
    events: list[tuple[str, str]] = []
    api.run(root, proposer="sweep", on_event=lambda k, m, e: events.append((k, m)))
    warnings = [m for k, m in events if "unconfined" in m]
    assert len(warnings) == 1, warnings
    assert all(e["meta"]["unconfined"] for e in api.log(root))  # they ran unconfined too


def test_the_unconfined_warning_is_printed_with_one_prefix(
        tiny_target: TinyFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tiny_target(budget=1, pairs=2)
    monkeypatch.setenv("ASSAY_SANDBOX", "off")
    r = CliRunner().invoke(app, ["run", "--root", str(root), "--proposer", "sweep"])
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.output.splitlines() if "run unconfined" in ln]
    assert len(lines) == 1, r.output
    assert lines[0].strip().startswith("warning: commands from the trees run unconfined"), \
        lines
    assert "warning: warning" not in r.output


def test_the_sandboxed_agent_cannot_touch_the_users_checkout(
        tiny_target: TinyFactory, tmp_path: Path) -> None:
    root = _agent_target(tiny_target, tmp_path)
    readme, work = (root / "README.md").read_text(), (root / "work.py").read_text()
    api.run(root, proposer="agent")
    assert (root / "README.md").read_text() == readme
    assert (root / "work.py").read_text() == work
    [exp] = api.log(root)
    assert exp["meta"]["isolation"] == "private checkout, sandbox"
    assert "WORK = 100000" in api.show(exp["id"], root)["patch"]
    assert not exp["meta"].get("unconfined")


KEYS = textwrap.dedent("""\
    import subprocess, sys
    from assay import keys
    from assay.bench import process
    keys.take()
    child = subprocess.run(["bash", "-c", "tr '\\\\0' '\\\\n' < /proc/$PPID/environ"],
                           capture_output=True, text=True)
    print("child saw:", child.stdout.replace("\\n", " "))
    print("assay has:", keys.get("OPENAI_API_KEY"))
    print("allowed:", process.scrubbed_env(process.EnvSpec(allow=("OPENAI_API_KEY",)))
          .get("OPENAI_API_KEY"))
    """)


def test_keys_leave_the_environment_before_any_child_starts(tmp_path: Path) -> None:
    secret = "sk-test-0123456789abcdef"
    env = {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": secret, "ANTHROPIC_API_KEY": secret,
           "PYTHONPATH": str(Path(api.__file__).resolve().parents[1])}
    r = subprocess.run([sys.executable, "-c", KEYS], env=env, capture_output=True, text=True,
                       cwd=tmp_path, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    child = next(ln for ln in r.stdout.splitlines() if ln.startswith("child saw:"))
    assert secret not in child and "PATH=/usr/bin:/bin" in child
    assert f"assay has: {secret}" in r.stdout  # read once, kept in memory
    assert f"allowed: {secret}" in r.stdout  # an [env] allow naming it still passes it


def test_a_node_that_cannot_sandbox_refuses_a_confined_runs_block(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_SANDBOX", "off")  # this node: no sandbox
    contain.node_gate(False)  # the run's own machine has none either: the gate said so there
    with pytest.raises(ExecutorError, match="cannot run the block's commands in a sandbox"):
        contain.node_gate(True)
    monkeypatch.delenv("ASSAY_SANDBOX")
    contain.node_gate(True)  # bubblewrap works here
