"""Completion hooks: at least once, keyed, recorded, and never blocking the loop."""

from __future__ import annotations

import time
from pathlib import Path

from hardening_kit import ListProposer, journal_rows, make_repo, procs_under, wait_dead

import assay.api as api
from assay.config.spec import load
from assay.journal.store import Journal
from assay.loop.hooks import Hooks

CRASH = ("diff --git a/work.py b/work.py\n--- a/work.py\n+++ b/work.py\n"
         "@@ -7,3 +7,4 @@ def run(n):\n         s += i * i\n         ops += 2\n     return ops\n"
         "+raise SystemExit(3)\n")

ITEMS = [{"params": {"SIZE": 1000}, "hypothesis": "keep me"},
         {"params": {"SIZE": 400000}, "hypothesis": "discard me"},
         {"patch": CRASH, "hypothesis": "crash me"}]


def hook_lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_every_hook_runs_with_its_key_and_is_recorded(tmp_path: Path) -> None:
    log = tmp_path / "hooks.log"
    line = f"echo \"$ASSAY_HOOK_KEY|$ASSAY_EVENT|$ASSAY_EXPERIMENT|$ASSAY_COMMIT\" >> {log}"
    repo = make_repo(tmp_path / "t", counted=True, extra=(
        f"[hooks]\non_keep = '{line}'\non_experiment = '{line}'\non_error = '{line}'\n"
        f"on_finish = '{line}'\n"))
    api.run(repo.root, budget=3, proposer_obj=ListProposer(ITEMS))
    keys = {ln.split("|")[0]: ln.split("|") for ln in hook_lines(log)}
    exps = {e["hypothesis"]: e for e in api.log(repo.root)}
    kept, crashed = exps["keep me"], exps["crash me"]
    assert kept["state"] == "kept" and crashed["state"] == "crashed"
    assert keys[f"on_keep:{kept['id']}"][3] == kept["commit"]
    for e in exps.values():
        assert f"on_experiment:{e['id']}" in keys
    assert f"on_error:{crashed['id']}" in keys
    assert any(k.startswith("on_finish:") for k in keys)
    rows = dict(journal_rows(repo, "SELECT key, status FROM hooks"))
    assert set(rows) == set(keys) and set(rows.values()) == {"ok"}
    assert len(hook_lines(log)) == len(keys)  # each ran once in a clean run


def test_failing_and_hanging_hooks_are_reported_and_do_not_block(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "t", counted=True, extra=(
        "[hooks]\non_keep = 'echo boom >&2; exit 3'\n"
        "on_experiment = 'sleep 30'\non_experiment_timeout = 0.5\n"))
    t0 = time.monotonic()
    summary = api.run(repo.root, budget=3, proposer_obj=ListProposer(ITEMS))
    took = time.monotonic() - t0
    assert summary.finished == 3
    assert took < 75, f"the hooks held the loop for {took:.0f}s"  # 3 x 30 s if they blocked
    rows = {k: (s, code, out) for k, s, code, out in journal_rows(
        repo, "SELECT key, status, exit_code, output FROM hooks")}
    keep_rows = [v for k, v in rows.items() if k.startswith("on_keep:")]
    assert keep_rows and keep_rows[0][0] == "failed" and keep_rows[0][1] == 3
    assert "boom" in keep_rows[0][2]
    exp_rows = [v for k, v in rows.items() if k.startswith("on_experiment:")]
    assert len(exp_rows) == 3 and {v[0] for v in exp_rows} == {"timeout"}
    events = [m for (m,) in journal_rows(repo, "SELECT message FROM events WHERE kind='hook'")]
    assert any("exited 3" in m for m in events) and any("timed out" in m for m in events)
    assert wait_dead(procs_under(repo.root)) == []  # the hanging hooks were killed


def test_pending_and_owed_hooks_run_again_on_resume(tmp_path: Path) -> None:
    log = tmp_path / "hooks.log"
    line = f"echo \"$ASSAY_HOOK_KEY $ASSAY_HOOK_RESUMED $ASSAY_COMMIT\" >> {log}"
    repo = make_repo(tmp_path / "t", counted=True,
                     extra=f"[hooks]\non_keep = '{line}'\non_experiment = '{line}'\n")
    api.run(repo.root, budget=2, proposer_obj=ListProposer(ITEMS))
    kept = next(e for e in api.log(repo.root) if e["state"] == "kept")
    # Simulate a crash: one hook was pending when the process died, one never registered.
    j = Journal.open(repo.journal)
    with j.tx():
        j.conn.execute("UPDATE hooks SET status = 'pending' WHERE key = ?",
                       (f"on_keep:{kept['id']}",))
        j.conn.execute("DELETE FROM hooks WHERE key LIKE 'on_experiment:%'")
    log.unlink()
    hooks = Hooks(load(repo.root), j)
    hooks.resume()
    hooks.join()
    lines = hook_lines(log)
    assert f"on_keep:{kept['id']} 1 {kept['commit']}" in lines
    assert sum(ln.startswith("on_experiment:") for ln in lines) == 2
    assert {s for (s,) in j.conn.execute("SELECT status FROM hooks")} == {"ok"}
    # Finished hooks are never repeated.
    log.unlink()
    Hooks(load(repo.root), j).resume()
    assert not log.exists()
    j.close()
