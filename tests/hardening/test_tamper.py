"""Tamper-proofing: every attempt a candidate (or a proposer) can make on the harness.

Each attempt runs through the real loop (``assay.api.run`` on a tiny git target) and the
test checks the experiment's final state and reason. ``TAMPER_OUTCOMES`` collects what
happened, printed at the end of the module (``pytest -s``) for the record.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from hardening_kit import ListProposer, Repo, make_repo

import assay.api as api
from assay.bench import process
from assay.errors import AssayError
from assay.model import Candidate
from assay.proposers.base import ProposalContext

TAMPER_OUTCOMES: list[tuple[str, str, str]] = []


def top_patch(*lines: str) -> str:
    """A patch that inserts ``lines`` at the top of work.py (runs when bench imports it)."""
    body = "".join(f"+{ln}\n" for ln in lines)
    return ("diff --git a/work.py b/work.py\n--- a/work.py\n+++ b/work.py\n"
            f"@@ -1,1 +1,{len(lines) + 1} @@\n{body} SIZE = 200000\n")


def file_patch(path: str, text: str = "x = 1", header: str = "") -> str:
    return (f"diff --git a/{path} b/{path}\n{header}--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1 @@\n+{text}\n")


PRE_RUN: dict[str, tuple[str, str]] = {
    # name: (patch, expected words in the rejection reason)
    "edit the protected benchmark": (
        "diff --git a/bench.py b/bench.py\n--- a/bench.py\n+++ b/bench.py\n"
        "@@ -1,1 +1,1 @@\n-import os\n+import os  # faster\n", "protected path 'bench.py'"),
    "edit assay.toml": (file_patch("assay.toml", "x = 1", "new file mode 100644\n"),
                        "protected path 'assay.toml'"),
    "path with ..": (file_patch("../outside.py", header="new file mode 100644\n"),
                     "escapes the repository"),
    "dotdot inside the path": (file_patch("src/../../outside.py",
                                          header="new file mode 100644\n"), "'..'"),
    "absolute path": ("--- /dev/null\n+++ /tmp/evil.py\n@@ -0,0 +1 @@\n+x = 1\n",
                      "absolute path"),
    "create a symlink": (
        "diff --git a/src/link b/src/link\nnew file mode 120000\n--- /dev/null\n"
        "+++ b/src/link\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n",
        "symbolic link"),
    "change a file into a symlink": (
        "diff --git a/work.py b/work.py\nold mode 100644\nnew mode 120000\n", "symbolic link"),
    "write into .git": (file_patch(".git/hooks/post-checkout", "rm -rf ~",
                                   "new file mode 100755\n"), "inside .git"),
    "write into .assay": (file_patch(".assay/journal.sqlite", "x"), "assay's state folder"),
    "rename onto the benchmark": (
        "diff --git a/work.py b/bench.py\nsimilarity index 100%\nrename from work.py\n"
        "rename to bench.py\n", "protected path 'bench.py'"),
    "add a protected data file": (file_patch("data/extra.txt", "1",
                                             "new file mode 100644\n"), "protected path"),
    "edit outside the editable scope": (file_patch("README.md", "hi",
                                                   "new file mode 100644\n"),
                                        "outside the editable scope"),
}

RUN_TIME: dict[str, tuple[str, str]] = {
    "the run rewrites bench.py": (
        top_patch("open('bench.py', 'a').write('# tampered\\n')"), "harness_changed"),
    "the run adds a protected data file": (
        top_patch("open('data/extra.txt', 'w').write('1')"), "harness_changed"),
    "the run deletes a protected file": (
        top_patch("import os as _o; _o.remove('data/input.txt')"), "harness_changed"),
    "the run swaps a protected file for a symlink": (
        top_patch("import os as _o; _o.remove('data/input.txt'); "
                  "_o.symlink('/etc/hostname', 'data/input.txt')"), "harness_changed"),
    "the run rewrites assay.toml": (
        top_patch("open('assay.toml', 'a').write('\\n')"), "harness_changed"),
    "a forged metric line after the real one": (
        top_patch("import atexit; atexit.register(lambda: print('METRIC speed=1e12'))"),
        "speed"),
    "a forged metric line before the real one": (
        top_patch("print('METRIC speed=1e12')"), "speed"),
}


def _state_of(repo: Repo) -> dict[str, Any]:
    return {e["hypothesis"]: e for e in api.log(repo.root)}


def test_tamper_attempts_are_rejected(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, counted=True)
    (tmp_path / "outside").mkdir()
    items = [{"patch": p, "hypothesis": name} for name, (p, _) in {**PRE_RUN,
                                                                    **RUN_TIME}.items()]
    api.run(repo.root, budget=len(items), proposer_obj=ListProposer(items))
    by_name = _state_of(repo)
    problems = []
    for name, (_, words) in {**PRE_RUN, **RUN_TIME}.items():
        e = by_name[name]
        TAMPER_OUTCOMES.append((name, e["state"], e["note"][:110]))
        if e["state"] != "invalid" or words not in e["note"]:
            problems.append(f"{name}: {e['state']} / {e['note']}")
    assert not problems, "\n".join(problems)
    # Nothing reached the user's tree, the outside world, or the run branch.
    assert not (tmp_path / "outside.py").exists() and not (repo.root.parent / "evil").exists()
    assert (repo.root / "data" / "input.txt").read_text() == "fixed input\n"
    assert "tampered" not in (repo.root / "bench.py").read_text()
    assert api.status(repo.root)["counts"] == {"invalid": len(items)}
    for name in RUN_TIME:  # run-time attempts were caught by a measured run, not before
        assert by_name[name]["note"].startswith(("harness_changed", "invalid")), name


def test_patch_through_a_symlinked_folder_cannot_escape(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    repo = make_repo(tmp_path / "t", counted=True)
    os.symlink(outside, repo.root / "src")  # a committed symlink out of the tree
    from hardening_kit import git

    git(repo.root, "add", "-A")
    git(repo.root, "commit", "-qm", "link")
    patch = file_patch("src/evil.py", "x = 1", "new file mode 100644\n")
    api.run(repo.root, budget=1, proposer_obj=ListProposer([{"patch": patch,
                                                             "hypothesis": "via link"}]))
    e = _state_of(repo)["via link"]
    TAMPER_OUTCOMES.append(("write through a symlink pointing out of the tree", e["state"],
                            e["note"][:110]))
    assert e["state"] == "invalid", e
    assert list(outside.iterdir()) == []


SECRETS = {"OPENAI_API_KEY": "sk-secret", "ANTHROPIC_API_KEY": "sk-ant-secret",
           "GITHUB_TOKEN": "ghp_secret", "AWS_SECRET_ACCESS_KEY": "aws-secret",
           "HF_TOKEN": "hf_secret", "MY_SERVICE_PASSWORD": "hunter2"}


def test_benchmark_environment_is_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    monkeypatch.setenv("ASSAY_SANDBOX", "off")  # the dump is written outside the tree
    dump = tmp_path / "env.json"
    hook_dump = tmp_path / "hook-env.json"
    py = f"import json, os; json.dump(dict(os.environ), open({str(dump)!r}, 'w'))"
    repo = make_repo(tmp_path / "t", counted=True, extra=(
        'allow = ["PATH", "HOME", "MY_ALLOWED"]\n'
        f"[hooks]\non_experiment = 'env > {hook_dump}'\n"))
    for k, v in {**SECRETS, "MY_ALLOWED": "yes"}.items():
        monkeypatch.setenv(k, v)
    api.run(repo.root, budget=1, proposer_obj=ListProposer([{"patch": top_patch(py),
                                                             "hypothesis": "dump env"}]))
    env = json.loads(dump.read_text())
    leaked = sorted(set(SECRETS) & set(env))
    hook_env = hook_dump.read_text()
    leaked_hook = sorted(k for k in SECRETS if k in hook_env)
    TAMPER_OUTCOMES.append(("read API keys and tokens from the environment",
                            "none reached the benchmark or hooks" if not leaked + leaked_hook
                            else f"LEAKED {leaked + leaked_hook}", ""))
    assert not leaked and not leaked_hook
    assert env["MY_ALLOWED"] == "yes" and "MY_ALLOWED=yes" in hook_env  # the allowlist works
    assert not any(v in json.dumps(env) for v in SECRETS.values())


def _one(tmp_path: Path, extra: str, code: str, name: str) -> dict[str, Any]:
    repo = make_repo(tmp_path / name.replace(" ", "-"), counted=True, extra=extra)
    api.run(repo.root, budget=1, proposer_obj=ListProposer([{"patch": top_patch(code),
                                                             "hypothesis": name}]))
    return _state_of(repo)[name]


def test_memory_limit(tmp_path: Path) -> None:
    e = _one(tmp_path, "[limits]\nmemory_mb = 400\n",
             "_hog = bytearray(2 * 1024 * 1024 * 1024)", "allocate 2 GiB")
    TAMPER_OUTCOMES.append(("allocate 2 GiB under memory_mb = 400", e["state"], e["note"][:110]))
    assert e["state"] == "crashed" and "MemoryError" in e["note"]


def test_cpu_limit(tmp_path: Path) -> None:
    e = _one(tmp_path, "[limits]\ncpu_s = 1\n", "while True: pass", "spin forever")
    TAMPER_OUTCOMES.append(("spin forever under cpu_s = 1", e["state"], e["note"][:110]))
    assert e["state"] == "crashed", e  # killed by SIGXCPU long before the 30 s timeout


def test_no_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_SANDBOX", "off")  # `unshare -rn`; the dump is outside the tree
    ok, why = process.network_isolation_available()
    if not ok:
        pytest.skip(why)
    out = tmp_path / "net.json"
    code = ("import json, socket; json.dump([n for _, n in socket.if_nameindex()], "
            f"open({str(out)!r}, 'w'))")
    e = _one(tmp_path, "[limits]\nnetwork = false\n", code, "list interfaces")
    names = json.loads(out.read_text())
    TAMPER_OUTCOMES.append(("use the network under network = false",
                            f"only interfaces {names} visible", ""))
    assert names == ["lo"], names
    host_names = [n for _, n in socket.if_nameindex()]
    assert e["state"] in ("discarded", "kept") or host_names == ["lo"]


def test_no_network_unavailable_is_a_clear_error(repo: Repo,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process.shutil, "which", lambda name: None)
    monkeypatch.setattr(process, "_UNSHARE_OK", None)
    repo.write_config(extra="[limits]\nnetwork = false\n")
    with pytest.raises(AssayError, match="unshare"):
        api.run(repo.root, budget=1, proposer_obj=ListProposer([{"params": {"SIZE": 1000}}]))


class TamperingProposer(ListProposer):
    """An 'agent' that edits the user's protected benchmark while proposing."""

    def propose(self, context: ProposalContext, n: int) -> list[Candidate]:
        bench = context.target.root / "bench.py"
        bench.write_text(bench.read_text() + "\n# made faster by the agent\n")
        return super().propose(context, n)


def test_proposer_editing_protected_paths_is_rejected(repo: Repo) -> None:
    prop = TamperingProposer([{"params": {"SIZE": 1000}, "hypothesis": "agent change"}])
    api.run(repo.root, budget=1, proposer_obj=prop)
    e = _state_of(repo)["agent change"]
    TAMPER_OUTCOMES.append(("a proposer edits bench.py in the user's repo while proposing",
                            e["state"], e["note"][:110]))
    assert e["state"] == "invalid" and e["note"].startswith("harness_changed")
    assert "bench.py" in e["note"]


HOLDOUT_CMD = ('holdout = "{py} -c \'import work; print(f\\"METRIC quality={{work.SIZE}}\\")\'"'
               "\n")


def test_holdout_never_reaches_a_proposer_and_gates_keeps(tmp_path: Path) -> None:
    import sys

    repo = make_repo(tmp_path, counted=True,
                     extra_commands=HOLDOUT_CMD.format(py=sys.executable),
                     extra='[holdout_metric]\nname = "quality"\ndirection = "maximize"\n'
                           "tolerance = 0.05\n")
    # A smaller SIZE is much faster (speed) but much worse on the holdout (quality = SIZE).
    prop = ListProposer([{"params": {"SIZE": 2000}, "hypothesis": "shrink"},
                         {"params": {"SIZE": 199000}, "hypothesis": "barely shrink"},
                         {"params": {"SIZE": 100000}, "hypothesis": "halve"}])
    api.run(repo.root, budget=3, proposer_obj=prop)
    by = _state_of(repo)
    assert by["shrink"]["state"] == "discarded" and "holdout" in by["shrink"]["note"]
    assert by["halve"]["state"] == "discarded" and "holdout" in by["halve"]["note"]
    # The holdout was measured (it is in the journal) ...
    runs = api.show(by["shrink"]["id"], repo.root)["runs"]
    assert any(r["holdout"].get("quality") for r in runs)
    # ... but no proposer context, summary or told experiment ever carried it.
    assert len(prop.contexts) >= 2
    for ctx in prop.contexts:
        assert ctx.history or ctx is prop.contexts[0]
        for summary in ctx.history:
            text = repr(summary)
            assert "quality" not in text and "regressed" not in text, text
            assert not hasattr(summary, "holdout")
    for exp in prop.told:  # told experiments: no holdout value or regression in them
        details = exp.decision.details if exp.decision else {}
        assert not any("holdout" in k or "quality" in k for k in details)
        assert "regressed" not in exp.note and "quality" not in exp.note
    # The journal flags them withheld (a field, not a word in the note) ...
    from assay.config import spec as config_mod
    from assay.faces import mcp
    from assay.journal.store import Journal
    from assay.model import WITHHELD_NOTE

    journal = Journal.open(repo.journal, readonly=True)
    try:
        flags = {e.candidate.hypothesis: e.withheld for e in journal.experiments()}
    finally:
        journal.close()
    assert flags["shrink"] and flags["halve"] and not flags["barely shrink"], flags
    # ... and no MCP tool a proposer can call returns a held-out value or regression.
    target = config_mod.load(repo.root)
    outputs = [mcp.log(target), mcp.best(target), mcp.status(target),
               *(mcp.show(target, by[h]["id"]) for h in ("shrink", "halve", "barely shrink"))]
    for out in outputs:
        text = json.dumps(out, default=str)
        assert "quality" not in text and "regressed" not in text, text
    assert "withheld" in json.dumps(mcp.show(target, by["shrink"]["id"]))
    # ... nor an export for proposers (pi-autoresearch's agent reads its log.jsonl), while
    # the plain export, for the person, keeps the held-out reason.
    for fmt in ("jsonl", "tsv", "csv"):
        text = api.export(fmt, repo.root, for_proposers=True)
        assert "quality" not in text and "regressed" not in text, text
    assert "holdout regressed" in api.export("jsonl", repo.root)
    # ... nor the MCP tool that measures a candidate, when its own one fails the holdout.
    got = mcp.run_experiment(target, params={"SIZE": 1000}, hypothesis="shrink further")
    assert got["state"] == "discarded" and got["note"] == WITHHELD_NOTE, got
    assert "regressed" not in json.dumps(got, default=str)
    TAMPER_OUTCOMES.append(("keep a change that regresses the holdout", by["shrink"]["state"],
                            by["shrink"]["note"][:110]))


def teardown_module() -> None:
    if TAMPER_OUTCOMES:
        print("\ntamper attempts and outcomes:")
        for name, state, note in TAMPER_OUTCOMES:
            print(f"  - {name}: {state} {('(' + note + ')') if note else ''}")
