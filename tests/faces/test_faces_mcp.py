"""`assay mcp`: the MCP server over stdio, driven by the SDK's own client.

The server is spawned as `python -m assay mcp --root <repo>`; a patch sent through the
`run_experiment` tool is validated, measured against the incumbent by a real loop and
decided, and the journal shows it afterwards.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest

import assay
from assay import api
from assay.faces import mcp as mcp_faces
from assay.model import BlockState

mcp_client = pytest.importorskip("mcp.client.stdio")
from mcp import ClientSession  # noqa: E402

PATCH = '''\
diff --git a/fast.py b/fast.py
--- a/fast.py
+++ b/fast.py
@@ -1 +1 @@
-BONUS = {old}
+BONUS = {value}
'''

OUT_OF_SCOPE = '''\
diff --git a/bench.py b/bench.py
--- a/bench.py
+++ b/bench.py
@@ -1,2 +1,2 @@
-import random
+import random  # faster
 import sys
'''


def _field(result: Any, snake: str, camel: str) -> Any:
    return getattr(result, snake) if hasattr(result, snake) else getattr(result, camel)


def _payload(result: Any) -> Any:
    assert not _field(result, "is_error", "isError"), result.content
    sc = _field(result, "structured_content", "structuredContent")
    if sc is not None:
        return sc["result"] if isinstance(sc, dict) and set(sc) == {"result"} else sc
    return json.loads(result.content[0].text)


def _error_text(result: Any) -> str:
    assert _field(result, "is_error", "isError")
    return " ".join(getattr(c, "text", "") for c in result.content)


async def _session_calls(root: Path, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    # The SDK passes the server only a few safe variables: name the assay under test.
    env = {**mcp_client.get_default_environment(),
           "PYTHONPATH": str(Path(assay.__file__).resolve().parents[1])}
    params = mcp_client.StdioServerParameters(
        command=sys.executable, args=["-m", "assay", "mcp", "--root", str(root)],
        cwd=str(root), env=env)
    out: dict[str, Any] = {}
    with anyio.fail_after(240):
        async with mcp_client.stdio_client(params) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                out["server"] = _field(init, "server_info", "serverInfo")
                tools = await session.list_tools()
                out["tools"] = sorted(t.name for t in tools.tools)
                for i, (name, args) in enumerate(calls):
                    out[f"{i}:{name}"] = await session.call_tool(name, args,
                                                                 read_timeout_seconds=180)
    return out


def _run_loop_apart(root: Path, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """``_session_calls`` on an event loop in a thread of its own.

    Playwright's sync API (the session-scoped ``browser`` fixture) keeps an asyncio loop
    marked running on the main thread for the whole session, so a loop started there
    fails ("Cannot run the event loop while another loop is running") whenever a browser
    test ran first; a fresh thread has no running loop, whatever ran before.
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mcp-client") as pool:
        return pool.submit(anyio.run, _session_calls, root, calls).result()


def test_mcp_tools_over_stdio(fresh_target: Path) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("status", {}),
        ("add_hypothesis", {"text": "BONUS 3 doubles the speed", "sources": ["doc:tuning.md"],
                            "source_kind": "doc", "score": 0.9}),
        ("run_experiment", {"patch": PATCH.format(old="1.5", value="3.0"),
                            "hypothesis": "BONUS 3 doubles the speed", "hypothesis_id": 4}),
        ("run_experiment", {"patch": PATCH.format(old="3.0", value="0.5"),
                            "hypothesis": "a slower BONUS"}),
        ("run_experiment", {"patch": OUT_OF_SCOPE, "hypothesis": "edit the benchmark"}),
        ("run_experiment", {"hypothesis": "nothing at all"}),
        ("log", {"last": 3}),
        ("best", {}),
        ("show", {"experiment_id": "e0007"}),
        ("stop", {}),
    ]
    res = _run_loop_apart(fresh_target, calls)
    assert res["server"].name == "assay" and res["server"].version == assay.__version__
    assert res["tools"] == ["add_hypothesis", "best", "log", "run_experiment", "show",
                            "status", "stop"]
    status = _payload(res["0:status"])
    assert status["experiments"] == 6 and status["counts"]["kept"] == 3
    assert status["metric"]["name"] == "speed"

    hyp = _payload(res["1:add_hypothesis"])
    assert hyp["id"] == 4 and hyp["source_kind"] == "doc"

    kept = _payload(res["2:run_experiment"])
    assert kept["id"] == "e0007" and kept["state"] == "kept" and kept["kept"] is True
    assert kept["decision"]["verdict"] == "keep" and kept["decision"]["lo"] > 0.01
    assert kept["incumbent"]["experiment"] == "e0007" and kept["commit"]
    assert kept["proposer"] == "mcp"

    worse = _payload(res["3:run_experiment"])
    assert worse["id"] == "e0008" and worse["state"] == "discarded" and not worse["kept"]
    assert worse["decision"]["hi"] < 0

    rejected = _payload(res["4:run_experiment"])
    assert rejected["state"] == "invalid" and "bench.py" in rejected["note"]

    assert "patch" in _error_text(res["5:run_experiment"])

    log = _payload(res["6:log"])
    assert [e["id"] for e in log] == ["e0007", "e0008", "e0009"]
    best = _payload(res["7:best"])
    assert best["incumbent"]["experiment"] == "e0007"
    assert [e["id"] for e in best["kept"]][-1] == "e0007"
    shown = _payload(res["8:show"])
    assert len(shown["runs"]) == 8 and "+BONUS = 3.0" in shown["patch"]
    stopped = _payload(res["9:stop"])
    assert stopped["running"] is False and "no run holds the lock" in stopped["message"]
    assert (fresh_target / ".assay" / "stop").exists()

    # The journal agrees, and the hypothesis was tested and supported.
    target = api.load(fresh_target)
    journal = api.open_journal(target, readonly=True)
    try:
        h = next(h for h in journal.hypotheses() if h.id == 4)
        assert h.status == "supported"
        e7 = journal.experiment("e0007")
        assert e7 is not None and e7.candidate.hypothesis_id == 4
    finally:
        journal.close()


def test_run_experiment_refuses_while_a_run_holds_the_lock(bare_target: Path) -> None:
    from assay.errors import LockError
    from assay.journal.lock import RunLock

    target = api.load(bare_target)
    with RunLock(target.state_dir / "run.lock"), pytest.raises(LockError):
        mcp_faces.run_experiment(target, PATCH.format(old="1.5", value="3.0"), "blocked")
    assert mcp_faces.stop(target)["running"] is False


def test_stop_reports_a_live_run(bare_target: Path) -> None:
    from assay.journal.lock import RunLock

    target = api.load(bare_target)
    with RunLock(target.state_dir / "run.lock"):
        result = mcp_faces.stop(target)
    assert result["running"] is True and "will stop" in result["message"]


def test_run_experiment_on_a_new_target_calibrates_first(bare_target: Path) -> None:
    target = api.load(bare_target)
    mcp_faces.stop(target)  # a stop file left over from no live run is ignored
    out = mcp_faces.run_experiment(target, PATCH.format(old="1.0", value="2.0"), "double BONUS",
                                   timeout_s=120)
    assert out["id"] == "e0001" and out["kept"] is True and out["stopped"] == ""
    st = mcp_faces.status(target)
    assert st["calibration"] is not None and st["calibration"]["pooled"] > 0
    assert st["counts"] == {"kept": 1}
    assert not (bare_target / ".assay" / "stop").exists()
    assert not (bare_target / ".assay" / "run.lock").exists()


def _slow_target(root: Path, log: Path) -> Path:
    """The tiny target with a one-second benchmark, no calibration and an on_finish hook."""
    import subprocess

    bench = root / "bench.py"
    bench.write_text("import time\ntime.sleep(1.0)\n" + bench.read_text())
    config = root / "assay.toml"
    line = f"echo \"$ASSAY_HOOK_KEY|$ASSAY_STOP_REASON\" >> {log}"
    config.write_text(config.read_text().replace("aa_blocks = 1", "aa_blocks = 0")
                      + f"\n[hooks]\non_finish = '{line}'\n")
    subprocess.run(["git", "commit", "-qam", "slow bench"], cwd=root, check=True)
    return root


def test_run_experiment_goes_through_the_loop_driver(bare_target: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The MCP path gets what `assay run` gets: it stops when it loses its lock, re-queues
    the block it was running, and fires on_finish."""
    import sqlite3
    import threading
    import time

    from assay.errors import AssayError
    from assay.journal.lock import RunLock

    log = tmp_path / "hooks.log"
    root = _slow_target(bare_target, log)
    lost = threading.Event()

    class LosingLock(RunLock):
        """A lock that stops being held the moment ``lost`` is set (a stolen heartbeat)."""

        releasing = False

        @property  # type: ignore[override]
        def held(self) -> bool:
            return self._held and (self.releasing or not lost.is_set())

        @held.setter
        def held(self, value: bool) -> None:
            self._held = value

        def release(self) -> None:  # the test's own cleanup: the file is really freed
            self.releasing = True
            super().release()

    monkeypatch.setattr(api, "RunLock", LosingLock)
    target = api.load(root)

    def lose_when_running() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not lost.is_set():
            if (target.state_dir / "journal.sqlite").exists():
                try:
                    journal = api.open_journal(target, readonly=True)
                except AssayError:
                    continue  # not a journal yet: the run is still creating it
                try:
                    if journal.blocks("e0001", states=(BlockState.RUNNING,)):
                        lost.set()
                except sqlite3.Error:
                    pass  # its tables are not there yet
                finally:
                    journal.close()
            time.sleep(0.05)

    watcher = threading.Thread(target=lose_when_running, daemon=True)
    watcher.start()
    out = mcp_faces.run_experiment(target, PATCH.format(old="1.0", value="2.0"), "double BONUS",
                                   timeout_s=120)
    watcher.join(timeout=5)
    assert lost.is_set()
    assert out["finished"] is False and out["kept"] is False
    assert "lost its lock" in out["stopped"] and "left queued" in out["stopped"]
    journal = api.open_journal(target, readonly=True)
    try:
        [block] = journal.blocks("e0001")
        assert block.state is BlockState.QUEUED and block.slot is None  # re-queued for resume
        assert journal.runs("e0001") == []  # its partial runs dropped
        hooks = journal.hooks()
        events = [e.kind for e in journal.events()]
    finally:
        journal.close()
    assert [h.event for h in hooks] == ["on_finish"] and hooks[0].status == "ok"
    assert "stop" in events
    [line] = log.read_text().splitlines()
    assert line.startswith("on_finish:") and "lost its lock" in line
    # The next call resumes the re-queued block and decides the experiment.
    monkeypatch.setattr(api, "RunLock", RunLock)
    again = mcp_faces.run_experiment(target, PATCH.format(old="1.0", value="2.5"), "more BONUS",
                                     timeout_s=120)
    assert again["finished"] is True and again["stopped"] == ""
    assert mcp_faces.log(target)[0]["state"] == "kept"  # e0001, resumed and decided


def test_requests_sent_just_before_stdin_closes_are_all_answered(bare_target: Path) -> None:
    import subprocess

    from mcp import types

    def request(rid: int, method: str, params: dict[str, Any]) -> str:
        return types.JSONRPCRequest(jsonrpc="2.0", id=rid, method=method,
                                    params=params).model_dump_json(by_alias=True) + "\n"

    init = {"protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "pipe", "version": "1"}}
    sent = (request(1, "initialize", init)
            + types.JSONRPCNotification(jsonrpc="2.0", method="notifications/initialized"
                                        ).model_dump_json(by_alias=True) + "\n"
            + request(2, "tools/call", {"name": "log", "arguments": {}})
            + request(3, "tools/call", {"name": "status", "arguments": {}}))
    proc = subprocess.run([sys.executable, "-m", "assay", "mcp", "--root", str(bare_target)],
                          input=sent, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    answers = {m["id"]: m for m in map(json.loads, proc.stdout.splitlines()) if "id" in m}
    assert sorted(answers) == [1, 2, 3], proc.stdout + proc.stderr
    status = json.loads(answers[3]["result"]["content"][0]["text"])
    assert status["metric"]["name"] == "speed"
    assert "error" not in answers[2]
