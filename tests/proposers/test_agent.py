"""The agent proposer with scripted agent executables in real temp git repos."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from proposer_helpers import (
    APP,
    BENCH,
    applies,
    calls_of,
    config_text,
    context_of,
    journaled,
    make_repo,
    sh,
    target_of,
)

from assay.bench.meter import Caps, Meter
from assay.config.prices import for_target
from assay.config.spec import Target
from assay.errors import CapReached, ConfigError, ProposerError
from assay.proposers.agent import AgentProposer, render_command
from assay.proposers.edits import rejection
from assay.usage import Spent

EDIT_AGENT = r'''
import pathlib, sys
brief = pathlib.Path(".assay-brief.md").read_text()
assert "## What to do" in brief, brief
assert "## Measurement" in brief
app = pathlib.Path("src/app.py")
loop = "    total = 0\n    for i in range(n):\n        total += i * i\n    return total\n"
imports = "import time\n\nfrom src.helper import squares\n"
app.write_text(app.read_text().replace(loop, "    return squares(n)\n").replace(
    "import time\n", imports))
helper = "def squares(n):\n    return (n - 1) * n * (2 * n - 1) // 6\n"
pathlib.Path("src/helper.py").write_text(helper)
pathlib.Path(".assay-hypothesis.txt").write_text("closed form in a helper module\nmore text\n")
print("done")
'''


def repo(tmp_path: Path, agent: str) -> tuple[Target, str]:
    root = tmp_path / "repo"
    commit = make_repo(root, {"src/app.py": APP, "bench.py": BENCH,
                              "program.md": "Make work() faster.\n"},
                       config_text(agent=agent))
    return target_of(root), commit


def script(tmp_path: Path, body: str, name: str = "agent.py") -> str:
    path = tmp_path / name
    path.write_text(body)
    return f"{sys.executable} {path}"


def agent_cfg(command: str, extra: str = "") -> str:
    return f"command = '''{command}'''\n" + extra


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its reaper is not running
        state = Path(f"/proc/{pid}/status").read_text()
        return "\nState:\tZ" not in state
    except OSError:
        return False


def test_edits_become_a_candidate_with_new_files(tmp_path: Path) -> None:
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, EDIT_AGENT)))
    proposer = AgentProposer.from_target(target)
    [cand] = proposer.propose(context_of(target, commit), 1)
    assert rejection(cand) is None, cand.meta
    assert cand.hypothesis == "closed form in a helper module"
    assert "diff --git a/src/app.py b/src/app.py" in cand.patch
    assert "new file mode 100644" in cand.patch and "b/src/helper.py" in cand.patch
    assert ".assay-brief" not in cand.patch and ".assay-hypothesis" not in cand.patch
    assert applies(target.root, cand.patch)
    assert cand.meta["exit_code"] == 0 and cand.meta["attempts"] == 1
    assert sh(target.root, "git", "worktree", "list").count("\n") == 1  # private tree removed
    assert sh(target.root, "git", "status", "--porcelain") == ""


SPY_AGENT = r'''
import os, pathlib, subprocess, sys
root, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
seen = [f"cwd {os.getcwd()}"]
def grab(path):
    try:
        seen.append(f"read {path}: {pathlib.Path(path).read_bytes()[:200]!r}")
    except OSError as exc:
        seen.append(f"denied {path}: {type(exc).__name__}")
for p in ["holdout.py", "heldout/answers.txt", root / "holdout.py", root / "heldout/answers.txt",
          root / ".assay/journal.sqlite", root / ".assay/logs/r1-a.holdout.out",
          root / ".git/config"]:
    grab(p)
for p in root.rglob("*"):  # anything reachable in the target's folder
    if p.is_file():
        grab(p)
common = subprocess.run(["git", "rev-parse", "--git-common-dir"], capture_output=True,
                        text=True).stdout.strip()
seen.append(f"git {os.path.abspath(common)}")
for pid in os.listdir("/proc"):  # other processes' folders lead back to the target
    if pid.isdigit():
        for link in ("cwd", "root"):
            try:
                grab(os.path.join(os.readlink(f"/proc/{pid}/{link}"), ".assay/journal.sqlite"))
            except OSError:
                pass
out.write_text("\n".join(seen))
app = pathlib.Path("src/app.py")
app.write_text(app.read_text() + "\n# touched\n")
'''


def test_agent_cannot_read_the_holdout_or_the_journal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_SANDBOX", "off")  # its record is written outside the checkout
    root = tmp_path / "repo"
    seen = tmp_path / "seen.txt"
    cmd = f"{script(tmp_path, SPY_AGENT)} {root} {seen}"
    cfg = config_text(agent=agent_cfg(cmd)).replace(
        'protected = ["bench.py"]', 'protected = ["bench.py"]\nholdout = ["heldout/**"]').replace(
        'bench = "python bench.py"', 'bench = "python bench.py"\nholdout = "python holdout.py"')
    cfg += '\n[holdout_metric]\nname = "quality"\ndirection = "maximize"\n'
    commit = make_repo(root, {"src/app.py": APP, "bench.py": BENCH,
                              "holdout.py": "print('METRIC quality=SECRET-SCRIPT')\n",
                              "heldout/answers.txt": "SECRET-ANSWERS\n"}, cfg)
    (root / "heldout" / "extra.txt").write_text("SECRET-UNTRACKED\n")  # not in git at all
    logs = root / ".assay" / "logs"
    logs.mkdir(parents=True)
    (logs / "r1-a.holdout.out").write_text("METRIC quality=SECRET-LOG\n")
    (root / ".assay" / "journal.sqlite").write_text("SECRET-JOURNAL")
    target = target_of(root)
    assert target.is_protected("heldout/answers.txt")

    [cand] = AgentProposer.from_target(target).propose(context_of(target, commit), 1)

    observed = seen.read_text()
    assert "SECRET" not in observed, observed
    assert "SECRET" not in cand.patch and "SECRET" not in json.dumps(cand.meta)
    cwd = Path(observed.splitlines()[0].removeprefix("cwd "))
    assert root.resolve() not in cwd.resolve().parents  # outside the target and its .assay
    git_dir = Path(next(ln for ln in observed.splitlines() if ln.startswith("git ")
                        ).removeprefix("git "))
    assert git_dir.resolve() == (cwd / ".git").resolve()  # its own repository, no link back
    assert rejection(cand) is None and "# touched" in cand.patch
    assert applies(root, cand.patch)
    assert cand.meta["isolation"] == "private checkout, mount namespace"


def test_without_a_mount_namespace_the_checkout_still_lacks_the_holdout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_SANDBOX", "off")  # its record is written outside the checkout
    # A machine that forbids unprivileged namespaces: the agent still works in a private
    # repository outside the target, with no holdout file and no link back to the journal.
    import assay.proposers.agent as agent_mod

    monkeypatch.setattr(agent_mod, "mount_isolation_available",
                        lambda: (False, "no unprivileged mount namespaces here"))
    root = tmp_path / "repo"
    seen = tmp_path / "seen.txt"
    cmd = f"{script(tmp_path, SPY_AGENT)} {root} {seen}"
    cfg = config_text(agent=agent_cfg(cmd)).replace(
        'protected = ["bench.py"]', 'protected = ["bench.py"]\nholdout = ["heldout/**"]').replace(
        'bench = "python bench.py"', 'bench = "python bench.py"\nholdout = "python holdout.py"')
    commit = make_repo(root, {"src/app.py": APP, "bench.py": BENCH,
                              "holdout.py": "print('SECRET-SCRIPT')\n",
                              "heldout/answers.txt": "SECRET-ANSWERS\n"}, cfg)
    target = target_of(root)
    [cand] = AgentProposer.from_target(target).propose(context_of(target, commit), 1)
    lines = seen.read_text().splitlines()
    assert "denied holdout.py: FileNotFoundError" in lines
    assert "denied heldout/answers.txt: FileNotFoundError" in lines
    cwd = Path(lines[0].removeprefix("cwd "))
    assert root.resolve() not in cwd.resolve().parents
    git_dir = Path(next(ln for ln in lines if ln.startswith("git ")).removeprefix("git "))
    assert git_dir.resolve() == (cwd / ".git").resolve()
    assert cand.meta["isolation"] == "private checkout" and rejection(cand) is None


def test_hypothesis_and_usage_from_json_output(tmp_path: Path) -> None:
    body = r'''
import json, pathlib
p = pathlib.Path("src/app.py")
p.write_text(p.read_text().replace("total += i * i", "total += i*i"))
print(json.dumps({"type": "result", "result": "Done.\nHYPOTHESIS: tighter arithmetic",
                  "total_cost_usd": 0.042,
                  "usage": {"input_tokens": 10, "cache_read_input_tokens": 5,
                            "cache_creation_input_tokens": 0, "output_tokens": 7}}))
'''
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, body)))
    journal, meter = journaled(target)
    [cand] = AgentProposer.from_target(target).propose(
        context_of(target, commit, meter=meter), 1)
    assert cand.hypothesis == "tighter arithmetic"
    _, [call] = calls_of(journal, cand)
    assert call.tokens_in == 15 and call.tokens_out == 7
    assert call.cost_usd == pytest.approx(0.042) and call.priced_by == "reported"
    assert not {"tokens_in", "tokens_out", "tokens_cached", "cost_usd", "priced"} & set(
        cand.meta)


def test_claude_code_result_with_model_usage_is_recorded_as_reported(tmp_path: Path) -> None:
    # the result object `claude -p --output-format json` prints, modelUsage included
    body = r'''
import json, pathlib
p = pathlib.Path("src/app.py")
p.write_text(p.read_text().replace("total += i * i", "total += i*i"))
print(json.dumps({"type": "result", "subtype": "success", "is_error": False,
                  "num_turns": 4, "result": "HYPOTHESIS: fewer spaces",
                  "total_cost_usd": 0.1234,
                  "usage": {"input_tokens": 12, "cache_creation_input_tokens": 300,
                            "cache_read_input_tokens": 4000, "output_tokens": 800},
                  "modelUsage": {
                      "claude-sonnet-4-5-20250929": {
                          "inputTokens": 12, "outputTokens": 800,
                          "cacheReadInputTokens": 4000, "cacheCreationInputTokens": 300,
                          "costUSD": 0.12},
                      "claude-haiku-4-5-20251001": {
                          "inputTokens": 100, "outputTokens": 20, "cacheReadInputTokens": 0,
                          "cacheCreationInputTokens": 0, "costUSD": 0.0034}}}))
'''
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, body)))
    journal, meter = journaled(target)
    [cand] = AgentProposer.from_target(target).propose(
        context_of(target, commit, meter=meter), 1)
    _, [call] = calls_of(journal, cand)
    assert call.tokens_in == 12 + 300 + 4000 + 100 and call.tokens_out == 820
    assert call.tokens_cached == 4000
    assert call.cost_usd == pytest.approx(0.1234) and call.priced_by == "reported"
    assert cand.meta["model"] == "claude-haiku-4-5-20251001+claude-sonnet-4-5-20250929"
    assert meter.session.usd == pytest.approx(0.1234) and meter.session.calls == 1


CODEX = r'''
import json, pathlib
p = pathlib.Path("src/app.py")
p.write_text(p.read_text().replace("total += i * i", "total += i*i"))
for event in [
    {"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"},
    {"type": "turn.started"},
    {"type": "item.completed", "item": {"id": "item_1", "type": "reasoning", "text": "..."}},
    {"type": "turn.completed", "usage": {"input_tokens": 24763, "cached_input_tokens": 24448,
                                         "output_tokens": 122}},
    {"type": "turn.started"},
    {"type": "item.completed", "item": {"id": "item_3", "type": "agent_message",
                                        "text": "Done.\nHYPOTHESIS: codex made it tighter"}},
    {"type": "turn.completed", "usage": {"input_tokens": 1000, "cached_input_tokens": 0,
                                         "output_tokens": 78}},
]:
    print(json.dumps(event))
'''


def test_codex_json_events_are_added_up_and_priced_by_the_model(tmp_path: Path) -> None:
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, CODEX), 'model = "gpt-5"\n'))
    journal, meter = journaled(target)
    [cand] = AgentProposer.from_target(target).propose(
        context_of(target, commit, meter=meter), 1)
    assert cand.hypothesis == "codex made it tighter"
    _, [call] = calls_of(journal, cand)
    assert call.tokens_in == 25763 and call.tokens_cached == 24448
    assert call.tokens_out == 200 and cand.meta["model"] == "gpt-5"
    # gpt-5 in the bundled table: $1.25 input, $0.125 cached, $10 output per Mtok
    want = ((25763 - 24448) * 1.25 + 24448 * 0.125 + 200 * 10.0) / 1e6
    assert call.cost_usd == pytest.approx(want) and call.priced_by == "table"


def test_codex_without_a_model_has_tokens_and_price_unknown(tmp_path: Path) -> None:
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, CODEX)))
    journal, meter = journaled(target)
    [cand] = AgentProposer.from_target(target).propose(
        context_of(target, commit, meter=meter), 1)
    spent, [call] = calls_of(journal, cand)
    assert call.tokens_in == 25763 and call.cost_usd is None
    assert spent.unpriced == 1 and spent.usd == 0


def test_a_cli_that_reports_nothing_is_unknown_not_zero(tmp_path: Path) -> None:
    body = '''
import pathlib
p = pathlib.Path("src/app.py")
p.write_text(p.read_text().replace("total += i * i", "total += i*i"))
print("edited src/app.py")
'''
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, body)))
    journal, meter = journaled(target, Caps(max_usd=1.0))
    [cand] = AgentProposer.from_target(target).propose(
        context_of(target, commit, meter=meter), 1)
    spent, [call] = calls_of(journal, cand)
    assert call.tokens_in is None and call.tokens_out is None
    assert call.cost_usd is None and spent.unknown == 1 and spent.usd == 0
    assert meter.session.unknown == 1 and meter.session.calls == 1
    # with a dollar cap, a run whose spend cannot be counted stops the next call
    assert "is of unknown usage and reported no cost" in meter.reached
    with pytest.raises(CapReached, match="can no longer be counted"):
        AgentProposer.from_target(target).propose(context_of(target, commit, meter=meter), 1)


def test_a_count_the_cli_leaves_out_is_unknown_not_zero(tmp_path: Path) -> None:
    # a result whose usage names no output_tokens: the output is unknown, and a total over
    # it says so
    body = r'''
import json, pathlib
p = pathlib.Path("src/app.py")
p.write_text(p.read_text().replace("total += i * i", "total += i*i"))
print(json.dumps({"type": "result", "result": "HYPOTHESIS: fewer spaces",
                  "usage": {"input_tokens": 10, "cache_read_input_tokens": 5,
                            "cache_creation_input_tokens": 0}}))
'''
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, body), 'model = "gpt-5"\n'))
    journal, meter = journaled(target, Caps(max_tokens=1_000_000))
    [cand] = AgentProposer.from_target(target).propose(
        context_of(target, commit, meter=meter), 1)
    spent, [call] = calls_of(journal, cand)
    assert (call.tokens_in, call.tokens_out, call.cost_usd) == (15, None, None)
    assert journal.conn.execute("SELECT tokens_out FROM model_calls").fetchone()[0] is None
    assert (spent.calls, spent.unknown, spent.unpriced) == (1, 1, 0)
    assert spent.words().endswith("; 1 call of unknown usage, not fully counted")
    # with a token cap, a run whose tokens cannot be counted stops the next call
    assert meter.reached.startswith("a token cap is set, but a call of model gpt-5 is of "
                                    "unknown usage")
    with pytest.raises(CapReached, match="tokens can no longer be counted"):
        AgentProposer.from_target(target).propose(context_of(target, commit, meter=meter), 1)


def test_an_agent_is_not_started_once_a_cap_is_spent(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    body = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\n"
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, body)))
    meter = Meter(for_target(target), Caps(max_usd=0.05), before=Spent(calls=3, usd=0.05))
    with pytest.raises(CapReached, match=r"max_usd = \$0.05 is reached"):
        AgentProposer.from_target(target).propose(context_of(target, commit, meter=meter), 1)
    assert not marker.exists()


def _marked(mark: str) -> list[int]:
    """Live processes carrying ``HANG_MARK=<mark>`` (pids inside a PID namespace differ)."""
    out = []
    for d in Path("/proc").iterdir():
        try:
            env = (d / "environ").read_bytes() if d.name.isdigit() else b""
        except OSError:
            continue
        if f"HANG_MARK={mark}".encode() in env.split(b"\0") and alive(int(d.name)):
            out.append(int(d.name))
    return out


def test_hanging_agent_is_killed_with_its_whole_group(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_SANDBOX", "off")  # its record is written outside the checkout
    pids = tmp_path / "pids"
    mark = os.urandom(8).hex()
    hang = tmp_path / "hang.sh"
    hang.write_text(f"#!/bin/bash\nexport HANG_MARK={mark}\nsleep 300 &\necho $! >> {pids}\n"
                    f"echo $$ >> {pids}\n( sleep 300 ) &\necho $! >> " + str(pids) + "\nwait\n")
    hang.chmod(0o755)
    target, commit = repo(tmp_path, agent_cfg(f"bash {hang}", "timeout_s = 1\n"))
    start = time.monotonic()
    [cand] = AgentProposer.from_target(target).propose(context_of(target, commit), 1)
    assert time.monotonic() - start < 30
    reason = rejection(cand)
    assert reason is not None and reason.startswith("timeout")
    assert cand.meta["timed_out"] is True
    assert len(pids.read_text().split()) == 3  # all three had started
    deadline = time.monotonic() + 30
    while _marked(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _marked(mark), "orphan processes survived the timeout"


def test_protected_file_edit_is_rejected_with_the_reason(tmp_path: Path) -> None:
    body = r'''
import pathlib
pathlib.Path("bench.py").write_text("print('score 1e9')\n")
p = pathlib.Path("src/app.py")
p.write_text(p.read_text() + "\n# faster\n")
'''
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, body)))
    [cand] = AgentProposer.from_target(target).propose(context_of(target, commit), 1)
    reason = rejection(cand)
    assert reason is not None and reason.startswith("scope:")
    assert "bench.py is protected" in reason
    assert "bench.py" in cand.patch  # what was attempted stays visible


def test_new_file_outside_the_scope_is_rejected(tmp_path: Path) -> None:
    body = "import pathlib\npathlib.Path('notes.txt').write_text('scratch')\n"
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, body)))
    [cand] = AgentProposer.from_target(target).propose(context_of(target, commit), 1)
    reason = rejection(cand)
    assert reason is not None and "notes.txt is outside the editable scope" in reason


def test_assay_toml_is_always_protected(tmp_path: Path) -> None:
    body = ("import pathlib\np = pathlib.Path('assay.toml')\n"
            "p.write_text(p.read_text().replace('bench.py\"]', 'x\"]'))\n")
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, body)))
    [cand] = AgentProposer.from_target(target).propose(context_of(target, commit), 1)
    reason = rejection(cand)
    assert reason is not None and "assay.toml is protected" in reason


def test_ignored_scratch_files_are_dropped(tmp_path: Path) -> None:
    body = r'''
import pathlib
pathlib.Path(".aider.chat.history.md").write_text("chat")
pathlib.Path(".aider.tags.cache.v4").mkdir()
pathlib.Path(".aider.tags.cache.v4/cache.db").write_text("x")
p = pathlib.Path("src/app.py")
p.write_text(p.read_text().replace("total += i * i", "total += i*i"))
print("HYPOTHESIS: spacing")
'''
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, body), 'ignore = [".aider*"]\n'))
    [cand] = AgentProposer.from_target(target).propose(context_of(target, commit), 1)
    assert rejection(cand) is None and ".aider" not in cand.patch
    assert cand.hypothesis == "spacing"


def test_environment_holds_only_what_the_config_allows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_SANDBOX", "off")  # its record is written outside the checkout
    dump = tmp_path / "env.json"
    body = ("import json, os, pathlib\n"
            f"pathlib.Path({str(dump)!r}).write_text(json.dumps(dict(os.environ)))\n"
            "p = pathlib.Path('src/app.py'); p.write_text(p.read_text() + '# x\\n')\n")
    extra = 'env = ["EXTRA_KEY", "ABSENT_KEY"]\n'
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, body), extra))
    environ = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "EXTRA_KEY": "yes",
               "SECRET_TOKEN": "leak", "OPENAI_API_KEY": "leak"}
    proposer = AgentProposer.from_target(target, environ=environ)
    [cand] = proposer.propose(context_of(target, commit), 1)
    assert rejection(cand) is None
    seen = json.loads(dump.read_text())
    assert seen["EXTRA_KEY"] == "yes" and seen["HOME"] == str(tmp_path)
    assert "SECRET_TOKEN" not in seen and "OPENAI_API_KEY" not in seen
    assert "ABSENT_KEY" not in seen


def test_failing_agent_is_rejected_with_its_stderr(tmp_path: Path) -> None:
    body = ("import pathlib, sys\np = pathlib.Path('src/app.py')\n"
            "p.write_text(p.read_text() + '# half done\\n')\n"
            "print('model quota exceeded', file=sys.stderr)\nsys.exit(3)\n")
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, body)))
    [cand] = AgentProposer.from_target(target).propose(context_of(target, commit), 1)
    reason = rejection(cand)
    assert reason is not None and reason.startswith("exit: the agent exited with status 3")
    assert "model quota exceeded" in reason


def test_agent_that_changes_nothing_is_rejected(tmp_path: Path) -> None:
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, "print('nothing to do')\n")))
    [cand] = AgentProposer.from_target(target).propose(context_of(target, commit), 1)
    reason = rejection(cand)
    assert reason is not None and reason.startswith("no_change")


def test_committed_changes_are_part_of_the_diff(tmp_path: Path) -> None:
    body = ("import pathlib, subprocess\np = pathlib.Path('src/app.py')\n"
            "p.write_text(p.read_text().replace('total = 0', 'total = 0  # start'))\n"
            "subprocess.run(['git', '-c', 'user.name=a', '-c', 'user.email=a@b', 'commit', "
            "'-qam', 'agent commit'], check=True)\n")
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, body)))
    [cand] = AgentProposer.from_target(target).propose(context_of(target, commit), 1)
    assert rejection(cand) is None and "total = 0  # start" in cand.patch
    assert applies(target.root, cand.patch)


def test_duplicate_reruns_once_with_a_note_then_rejects(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_SANDBOX", "off")  # its record is written outside the checkout
    briefs = tmp_path / "briefs"
    briefs.mkdir()
    body = ("import pathlib, uuid\n"
            f"pathlib.Path({str(briefs)!r}, uuid.uuid4().hex).write_text("
            "pathlib.Path('.assay-brief.md').read_text())\n"
            "p = pathlib.Path('src/app.py')\n"
            "p.write_text(p.read_text().replace('total += i * i', 'total += i*i'))\n")
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, body)))
    proposer = AgentProposer.from_target(target)
    [first] = proposer.propose(context_of(target, commit), 1)
    [again] = proposer.propose(context_of(target, commit,
                                          tried_digests=frozenset({first.digest})), 1)
    reason = rejection(again)
    assert reason is not None and reason.startswith("duplicate")
    assert again.meta["attempts"] == 2
    texts = [p.read_text() for p in briefs.iterdir()]
    assert sum("same change as an experiment already tried" in t for t in texts) == 1


def test_wave_runs_agents_in_parallel_and_flags_in_wave_duplicates(tmp_path: Path) -> None:
    body = ("import pathlib, time\ntime.sleep(1)\np = pathlib.Path('src/app.py')\n"
            "p.write_text(p.read_text().replace('total += i * i', 'total += i*i'))\n")
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, body)))
    cands = AgentProposer.from_target(target).propose(context_of(target, commit), 2)
    reasons = sorted(str(rejection(c)) for c in cands)
    assert reasons[0] == "None" and reasons[1].startswith("duplicate")


def test_placeholders_are_shell_quoted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_SANDBOX", "off")  # its record is written outside the checkout
    out = tmp_path / "argv.json"
    body = ("import json, sys, pathlib\n"
            f"pathlib.Path({str(out)!r}).write_text(json.dumps(sys.argv[1:]))\n"
            "p = pathlib.Path('src/app.py'); p.write_text(p.read_text() + '# x\\n')\n")
    cmd = script(tmp_path, body) + " {brief_name} {files} {model} ${HOME}x"
    target, commit = repo(tmp_path, agent_cfg(cmd, "model = \"it's $(rm -rf /)\"\n"))
    [cand] = AgentProposer.from_target(target, environ={
        "PATH": os.environ["PATH"], "HOME": "fake-home"}).propose(context_of(target, commit), 1)
    assert rejection(cand) is None
    argv = json.loads(out.read_text())
    assert argv == [".assay-brief.md", "src/app.py", "it's $(rm -rf /)", "fake-homex"]


def test_render_command_brief_text() -> None:
    values = {"brief_file": "/b", "brief_name": "b", "brief": "a 'quoted' $brief\n`x`",
              "hypothesis_file": "/h", "worktree": "/w", "files": "a.py\0b c.py",
              "model": ""}
    cmd = render_command("agent -p {brief} {files} {model}", values)
    assert cmd == "agent -p 'a '\"'\"'quoted'\"'\"' $brief\n`x`' a.py 'b c.py' ''"


def test_missing_cli_raises(tmp_path: Path) -> None:
    target, commit = repo(tmp_path, agent_cfg("no-such-agent-cli-xyz {brief_file}"))
    with pytest.raises(ProposerError, match="not installed"):
        AgentProposer.from_target(target).propose(context_of(target, commit), 1)


@pytest.mark.parametrize(("agent", "needle"), [
    ('preset = "claude"\n', "claude -p --output-format json --permission-mode acceptEdits"),
    ('preset = "claude"\nmodel = "opus"\n', "--model {model}"),
    ('preset = "codex"\n', "codex exec --json --full-auto"),
    ('preset = "aider"\n', "--message-file {brief_file} {files}"),
    ('preset = "claude"\ncommand = "my-agent {brief_file}"\n', "my-agent {brief_file}"),
])
def test_presets(tmp_path: Path, agent: str, needle: str) -> None:
    target, _ = repo(tmp_path, agent)
    proposer = AgentProposer.from_target(target)
    assert needle in proposer.command
    if "aider" in agent:
        assert ".aider*" in proposer.ignore


@pytest.mark.parametrize(("agent", "match"), [
    ("timeout_s = 10\n", r"needs `preset`"),
    ('preset = "cursor"\n', r"'cursor' is not one of the choices"),
    ('preset = "claude"\ntimout_s = 5\n', r"timout_s\] is not a known key"),
    ('preset = "claude"\nenv = ["BAD NAME"]\n', r"not an environment variable name"),
    ('command = " "\n', r"must not be empty"),
])
def test_config_errors(tmp_path: Path, agent: str, match: str) -> None:
    target, _ = repo(tmp_path, agent)
    with pytest.raises(ConfigError, match=match):
        AgentProposer.from_target(target)


def test_a_context_without_a_meter_is_refused(tmp_path: Path) -> None:
    target, commit = repo(tmp_path, agent_cfg(script(tmp_path, "print('{}')\n")))
    with pytest.raises(ProposerError, match="has no meter to count and cap the calls"):
        AgentProposer.from_target(target).propose(context_of(target, commit, meter=None), 1)
