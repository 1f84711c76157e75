"""[metric.watch]: progress lines read while the bench runs, and each early-stop condition
stopping a real subprocess that stalls, diverges or slows down."""

from __future__ import annotations

import math
import sys
import textwrap
import time
from pathlib import Path

import pytest

from assay.bench import process
from assay.bench.worker import early_stop_reason
from assay.config.watch import Watcher, WatchError, WatchSpec, from_table, parse_condition, validate
from assay.errors import ConfigError

LINE = r"step\s+(?P<step>\d+) \| loss (?P<loss>\S+) \| (?P<tokens_per_second>\d+) tok/s"
STOP = ("tokens_per_second < 0.2 * incumbent", "loss is not finite",
        "loss > 1.5 * ln(vocab) after step 10", "no progress line for 2 s")
SPEC = WatchSpec(LINE, STOP, {"vocab": 512.0})


def _bench(tmp_path: Path, body: str) -> str:
    """A bench that prints progress lines like examples/gpt's train.py, then a summary."""
    script = tmp_path / "bench.py"
    script.write_text(textwrap.dedent("""\
        import math, sys, time
        def line(step, loss, tps):
            print(f"step {step:5d} | loss {loss:.4f} | {tps:.0f} tok/s | mfu 40.0", flush=True)
        """) + textwrap.dedent(body) + "\nprint('---'); print('val_bpb: 1.0')\n")
    return f"{sys.executable} {script}"


def _run(tmp_path: Path, cmd: str, incumbent: dict[str, float] | None = None,
         timeout: float = 60.0) -> tuple[process.ProcResult, Watcher]:
    w = Watcher(SPEC, incumbent)
    r = process.run(cmd, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, timeout_s=timeout,
                    stdout_path=tmp_path / "out.txt", stderr_path=tmp_path / "err.txt",
                    registry=tmp_path / "procs", watch=w)
    return r, w


def test_healthy_run_is_not_stopped(tmp_path: Path) -> None:
    cmd = _bench(tmp_path, """
        for s in range(1, 30):
            line(s, 6.0 - 0.1 * s, 1000)
            time.sleep(0.01)
        """)
    r, w = _run(tmp_path, cmd, {"tokens_per_second": 1000.0})
    assert r.stopped == "" and r.exit_code == 0
    assert w.lines == 29 and w.medians()["tokens_per_second"] == 1000.0


def test_diverging_loss_nan_stops_the_run(tmp_path: Path) -> None:
    cmd = _bench(tmp_path, """
        line(1, 6.0, 1000); line(2, float("nan"), 1000)
        time.sleep(120)
        """)
    t0 = time.monotonic()
    r, _ = _run(tmp_path, cmd)
    assert r.stopped.startswith("loss is not finite (loss = nan)"), r.stopped
    assert r.exit_code is None and time.monotonic() - t0 < 60
    assert "val_bpb" not in r.stdout


def test_loss_above_limit_only_after_step_10(tmp_path: Path) -> None:
    limit = 1.5 * math.log(512)  # 9.36
    early = _bench(tmp_path, f"""
        for s in range(1, 10):
            line(s, {limit + 5}, 1000)
        """)
    r, _ = _run(tmp_path, early)
    assert r.stopped == "" and r.exit_code == 0  # high loss before step 10 is allowed
    late = _bench(tmp_path, f"""
        for s in range(1, 15):
            line(s, 5.0 if s < 12 else {limit + 1}, 1000)
        time.sleep(120)
        """)
    r, _ = _run(tmp_path, late)
    assert r.stopped.startswith("loss > 1.5 * ln(vocab) after step 10"), r.stopped
    assert "limit 9.35" in r.stopped and "3 lines in a row" in r.stopped


def test_one_slow_or_spiky_line_does_not_stop_the_run() -> None:
    # a step that waited for a busy CPU, or one loss spike, is not a useless run: a
    # comparison must hold on `persist` lines in a row; a NaN stops the run at once
    w = Watcher(SPEC, {"tokens_per_second": 1000.0})
    for step, tps in enumerate([1000, 150, 1000, 150, 150, 1000, 150, 150], start=1):
        assert w.feed(f"step {step} | loss 5.0 | {tps} tok/s", float(step)) == "", step
    assert w.feed("step 20 | loss 12.0 | 1000 tok/s", 20.0) == ""  # a spike
    assert w.feed("step 21 | loss 5.0 | 1000 tok/s", 21.0) == ""
    assert w.feed("step 22 | loss 5.0 | 150 tok/s", 22.0) == ""
    assert w.feed("step 23 | loss 5.0 | 150 tok/s", 23.0) == ""
    assert w.feed("step 24 | loss 5.0 | 150 tok/s", 24.0) == (
        "tokens_per_second < 0.2 * incumbent (tokens_per_second = 150, limit 200, "
        "3 lines in a row)")
    once = Watcher(SPEC)
    assert once.feed("step 1 | loss nan | 1000 tok/s", 1.0).startswith("loss is not finite")
    strict = Watcher(WatchSpec(LINE, STOP, {"vocab": 512.0}, persist=1),
                     {"tokens_per_second": 1000.0})
    assert strict.feed("step 1 | loss 5.0 | 150 tok/s", 1.0).endswith("(tokens_per_second "
                                                                      "= 150, limit 200)")


def test_stall_stops_the_run(tmp_path: Path) -> None:
    cmd = _bench(tmp_path, """
        line(1, 6.0, 1000); line(2, 5.9, 1000)
        time.sleep(120)
        """)
    t0 = time.monotonic()
    r, _ = _run(tmp_path, cmd)
    took = time.monotonic() - t0
    assert r.stopped.startswith("no progress line for 2 s"), r.stopped
    assert 2.0 <= took < 60


def test_slow_run_stops_against_the_incumbent(tmp_path: Path) -> None:
    cmd = _bench(tmp_path, """
        for s in range(1, 400):
            line(s, 6.0 - 0.01 * s, 150)
            time.sleep(0.2)
        """)
    r, _ = _run(tmp_path, cmd, {"tokens_per_second": 1000.0})
    assert r.stopped == ("tokens_per_second < 0.2 * incumbent "
                         "(tokens_per_second = 150, limit 200, 3 lines in a row)"), r.stopped
    # without an incumbent reference the condition is inactive
    fast = _bench(tmp_path, """
        for s in range(1, 5):
            line(s, 6.0, 150)
        """)
    r, _ = _run(tmp_path, fast)
    assert r.stopped == "" and r.exit_code == 0


def test_early_stop_reason_says_what_was_saved() -> None:
    text = early_stop_reason("loss is not finite (loss = nan)", 4.2, 45.0, 300.0)
    assert text == ("stopped early: loss is not finite (loss = nan); after 4.2 s, saving "
                    "about 41 s against the incumbent's run (45 s)")
    assert "against the bench timeout (300 s)" in early_stop_reason("x", 10.0, None, 300.0)


def test_expression_language_is_parsed_not_evaluated() -> None:
    c = parse_condition("max(loss, 1) / 2 >= -(3 - ln(exp(4)))")
    assert c.kind == "compare" and c.op == ">="
    w = Watcher(WatchSpec(r"loss (?P<loss>\S+)", (c.text,), persist=1))
    assert w.feed("loss 0.5", 0.0) == ""  # max(0.5, 1) / 2 = 0.5 < 1
    assert w.feed("loss 4", 0.0).endswith("(value = 2, limit 1)")  # 4 / 2 >= 1
    for bad in ("__import__('os').system('x') > 1", "loss > 1; rm", "loss >", "open(1) > 0",
                "loss > 1 > 2", "loss"):
        with pytest.raises(WatchError):
            parse_condition(bad)


def test_conditions_fire_in_declared_order() -> None:
    w = Watcher(WatchSpec(r"loss (?P<loss>\S+)", ("loss > 2", "loss < 100"), persist=1))
    assert w.feed("no match here", 1.0) == ""
    assert w.feed("loss 5", 1.0) == "loss > 2 (loss = 5, limit 2)"


def test_config_errors_name_the_key() -> None:
    def err(key: str, msg: str, valid: str) -> ConfigError:
        return ConfigError(msg, key=f"metric.watch.{key}")

    with pytest.raises(ConfigError, match="neither groups"):
        from_table({"line": LINE, "stop": ["speed < 1"]}, "metric.watch", err)
    with pytest.raises(ConfigError, match="named groups"):
        from_table({"line": "loss", "stop": ["loss > 1"]}, "metric.watch", err)
    with pytest.raises(ConfigError, match="not a key"):
        from_table({"line": LINE, "stop": ["loss > 1"], "when": 1}, "metric.watch", err)
    for bad in (0, 1.5, True, "3"):
        with pytest.raises(ConfigError, match="whole number of progress lines"):
            from_table({"line": LINE, "stop": ["loss > 1"], "persist": bad}, "metric.watch",
                       err)
    assert from_table({"line": LINE, "stop": ["loss > 1"], "persist": 5}, "metric.watch",
                      err).persist == 5
    assert validate(SPEC) == ""


def test_gpt_example_declares_the_four_conditions() -> None:
    import assay.config.spec as config

    target = config.load(Path(__file__).resolve().parents[1] / "examples" / "gpt")
    watch = target.metric.watch
    assert watch is not None
    kinds = sorted(c.kind for c in watch.conditions())
    assert kinds == ["compare", "compare", "not_finite", "silence"]
    w = Watcher(watch)
    assert w.feed("step    20 | loss 4.8282 | 1587975 tok/s | mfu 36.35 | 3/300s | epoch 0.01",
                  0.0) == ""
    assert w.medians() == {"step": 20.0, "loss": 4.8282, "tokens_per_second": 1587975.0,
                           "mfu": 36.35}


LOOP_CONFIG = """\
[metric]
name = "speed"
direction = "maximize"

[metric.watch]
line = 'step (?P<step>\\d+) \\| (?P<tps>\\d+) tok/s'
stop = ["tps < 0.5 * incumbent"]

[commands]
bench = "{python} bench.py"
bench_timeout = 60

[scope]
editable = ["work.py"]
protected = ["bench.py"]

[proposer.queue]
path = "patches"

[run]
slots = 1
budget = 1

[decision]
rule = "expensive"
max_pairs = 3
delta = 0.02
confirm = false
"""

LOOP_BENCH = """\
import pathlib
import time
import work
counter = pathlib.Path({counter!r})
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
tps = 1000.0 / (4 if n >= {busy_from} else 1) / (5 if work.FLAVOUR == 2 else 1)
for s in range(1, 8):
    print(f"step {{s}} | {{tps:.0f}} tok/s", flush=True)
    time.sleep(0.15)
print(f"METRIC speed={{tps}}")
"""


def _slow_target(tmp_path: Path, busy_from: int, slow_candidate: bool) -> Path:
    from .conftest import git, make_repo

    root = make_repo(tmp_path / "r", {
        "assay.toml": LOOP_CONFIG.format(python=sys.executable),
        "bench.py": LOOP_BENCH.format(counter=str(tmp_path / "runs"), busy_from=busy_from),
        "work.py": "FLAVOUR = 1\n"})
    (root / "work.py").write_text(f"FLAVOUR = {2 if slow_candidate else 3}\n")
    diff = git(root, "diff")
    git(root, "checkout", "--", "work.py")
    (root / "patches").mkdir()
    (root / "patches" / "1.patch").write_text("# hypothesis: the change\n" + diff)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "queue")
    return root


def _roles(root: Path) -> list[tuple[str, str, str]]:
    from assay import api

    return [(r["role"], r["status"], r["reason"]) for r in api.show("e0001", root)["runs"]]


def test_a_machine_that_got_busy_does_not_crash_the_candidate(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_SANDBOX", "off")  # the runs' counter is outside the trees
    # the two calibration runs are fast; from the third run on the machine is four times
    # slower for everyone: the candidate's first run is stopped against the old incumbent
    # run, measured again beside a fresh one, and then runs to the end
    from assay import api

    root = _slow_target(tmp_path, busy_from=3, slow_candidate=False)
    api.run(root, proposer="queue")
    state = {e["id"]: e["state"] for e in api.log(root)}["e0001"]
    runs = _roles(root)
    assert state != "crashed", runs
    assert runs[0][0] == "B" and runs[0][1] == "crashed"
    assert runs[0][2].startswith("stopped early: tps < 0.5 * incumbent"), runs[0]
    assert [(role, status) for role, status, _ in runs[1:3]] == [("A", "ok"), ("B", "ok")]


def test_a_candidate_slow_beside_a_fresh_incumbent_run_is_crashed(tmp_path: Path) -> None:
    from assay import api

    root = _slow_target(tmp_path, busy_from=10**6, slow_candidate=True)
    api.run(root, proposer="queue")
    exp = next(e for e in api.log(root) if e["id"] == "e0001")
    runs = _roles(root)
    assert exp["state"] == "crashed" and "stopped early" in exp["note"], (exp, runs)
    assert [(role, status) for role, status, _ in runs] == [
        ("B", "crashed"), ("A", "ok"), ("B", "crashed")]
