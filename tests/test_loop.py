"""The whole loop, end to end, on tiny real targets in temporary git repositories."""

from __future__ import annotations

import json
from pathlib import Path

from assay import api
from assay.model import Candidate, ExperimentState, Role

from .conftest import TinyFactory, git, patch_work


def _queue(root: Path, patches: dict[str, tuple[str, str]]) -> None:
    folder = root / "patches"
    folder.mkdir()
    for name, (hyp, diff) in patches.items():
        (folder / name).write_text(f"# hypothesis: {hyp}\n{diff}")


def test_keeps_a_real_gain_and_discards_a_loss(tiny_target: TinyFactory) -> None:
    root = tiny_target(work=300_000, slots=2, budget=2, pairs=4,
                       extra='[proposer.queue]\npath = "patches"\n')
    _queue(root, {"1-faster.patch": ("do a tenth of the work", patch_work(root, 30_000)),
                  "2-slower.patch": ("do four times the work", patch_work(root, 1_200_000))})
    user_head = git(root, "rev-parse", "HEAD")
    user_status = git(root, "status", "--porcelain")
    events: list[str] = []
    summary = api.run(root, proposer="queue", on_event=lambda k, m, e: events.append(k))

    states = {e["hypothesis"]: e["state"] for e in api.log(root)}
    assert states == {"do a tenth of the work": "kept", "do four times the work": "discarded"}
    assert summary.baseline is not None and summary.best is not None
    assert summary.best > summary.baseline * 3
    kept = summary.kept[0]
    assert kept.decision is not None and kept.decision.lo is not None
    assert kept.decision.lo > 0.02  # the whole interval clears delta
    # the run branch holds exactly the kept change; the user's branch did not move
    assert git(root, "rev-parse", "HEAD") == user_head
    assert git(root, "status", "--porcelain") == user_status
    branch_log = git(root, "log", "--format=%s", "assay/main").splitlines()
    assert branch_log[0].startswith("assay e0001") and branch_log[1] == "initial"
    assert "WORK = 30000" in git(root, "show", "assay/main:work.py")
    # ABBA interleaving on one slot per block
    shown = api.show("e0001", root)
    first_block = [r for r in shown["runs"] if r["block_id"] == "e0001-b1"]
    assert "".join(r["role"] for r in first_block) == "ABBA"
    assert len({r["slot"] for r in first_block}) == 1
    assert all(Path(r["stdout_path"]).exists() for r in shown["runs"])
    assert "keep" in events and "discarded" in events
    st = api.status(root)
    assert st["counts"] == {"kept": 1, "discarded": 1}
    assert st["incumbent"]["experiment"] == "e0001"


def test_the_second_candidate_is_measured_against_the_new_incumbent(
        tiny_target: TinyFactory) -> None:
    root = tiny_target(work=300_000, slots=1, budget=2, pairs=4,
                       extra='[proposer.queue]\npath = "patches"\n')
    _queue(root, {"1.patch": ("faster", patch_work(root, 30_000)),
                  "2.patch": ("same as before", patch_work(root, 30_000).replace(
                      "+WORK = 30000", "+WORK = 31000"))})
    api.run(root, proposer="queue")
    log = {e["id"]: e for e in api.log(root)}
    assert log["e0001"]["state"] == "kept"
    # e0002 patches the ORIGINAL file's line e0001 changed: a conflict with the incumbent
    assert log["e0002"]["state"] == "conflict"
    assert log["e0002"]["note"].startswith("conflict: work.py: the patch and the incumbent")


def test_sweep_runs_and_exports(tiny_target: TinyFactory, tmp_path: Path) -> None:
    root = tiny_target(work=100_000, slots=2, budget=3, pairs=2)
    summary = api.run(root)
    assert summary.finished == 3
    log = api.log(root)
    assert all(e["proposer"] == "sweep" and "WORK" in e["params"] for e in log)
    assert len({json.dumps(e["params"]) for e in log}) == 3  # no duplicate trials
    tsv = api.export("tsv", root).splitlines()
    assert tsv[0] == "commit\tspeed\tmemory_gb\tstatus\tdescription"
    assert len(tsv) == 5  # a baseline row, then the three experiments
    jsonl = [json.loads(x) for x in api.export("jsonl", root).splitlines()]
    assert jsonl[0]["type"] == "config"
    assert {j["status"] for j in jsonl[1:]} <= {"keep", "discard", "crash"}
    csv_text = api.export("csv", root, out=tmp_path / "r.csv")
    assert (tmp_path / "r.csv").read_text() == csv_text
    # a second session with its own budget continues the journal without repeating trials
    api.run(root, budget=1)
    log2 = api.log(root)
    assert len(log2) == 4
    assert len({json.dumps(e["params"]) for e in log2}) == 4


def _edit(root: Path, name: str, old: str, new: str) -> str:
    p = root / name
    text = p.read_text()
    p.write_text(text.replace(old, new))
    diff = git(root, "diff")
    p.write_text(text)
    return diff


def test_bad_candidates_are_judged_without_keeping(tiny_target: TinyFactory) -> None:
    root = tiny_target(budget=4, pairs=2, extra='[proposer.queue]\npath = "patches"\n')
    crash = _edit(root, "work.py", "WORK = 200000", 'WORK = "x"')
    protected = _edit(root, "bench.py", "import work", "import work; print('METRIC speed=1e12')")
    nometric = _edit(root, "work.py", "UNITS = 1000", "UNITS = float('nan')")
    _queue(root, {"1-crash.patch": ("crash it", crash),
                  "2-protected.patch": ("edit the benchmark", protected),
                  "3-dup.patch": ("crash it again", crash),
                  "4-nan.patch": ("report a NaN", nometric)})
    api.run(root, proposer="queue")
    log = {e["hypothesis"]: e for e in api.log(root)}
    assert log["crash it"]["state"] == "crashed"
    assert "TypeError" in log["crash it"]["note"]
    assert log["edit the benchmark"]["state"] == "invalid"
    assert "protected path 'bench.py'" in log["edit the benchmark"]["note"]
    assert "crash it again" not in log  # the queue skips a diff already tried
    assert log["report a NaN"]["state"] == "invalid"
    assert "speed" in log["report a NaN"]["note"]
    assert git(root, "rev-parse", "assay/main") == git(root, "rev-parse", "HEAD")
    runs = api.show(log["edit the benchmark"]["id"], root)["runs"]
    assert runs == []  # rejected before it cost a run


def test_duplicates_are_rejected_before_any_run(tiny_target: TinyFactory) -> None:
    from assay.model import Candidate

    root = tiny_target(budget=3, pairs=2)
    target = api.load(root)
    with api.session(target) as loop:
        inc = loop.start()
        first = loop.submit_candidate(Candidate(inc.commit, params={"WORK": 5000}, hypothesis="a"))
        again = loop.submit_candidate(Candidate(inc.commit, params={"WORK": 5000}, hypothesis="b"))
        empty = loop.submit_candidate(Candidate(inc.commit, hypothesis="nothing"))
        unknown = loop.submit_candidate(Candidate(inc.commit, params={"NOPE": 1}))
    assert first.state is ExperimentState.QUEUED
    assert again.state is ExperimentState.INVALID and "identical to e0001" in again.note
    assert empty.state is ExperimentState.INVALID and "changes nothing" in empty.note
    assert unknown.state is ExperimentState.INVALID and "undeclared" in unknown.note


def test_a_candidate_with_the_incumbents_values_is_rejected_before_any_run(
        tiny_target: TinyFactory) -> None:
    root = tiny_target(budget=3, pairs=2)
    cfg = (root / "assay.toml").read_text()
    (root / "assay.toml").write_text(cfg.replace('file = "work.py"\n',
                                                 'file = "work.py"\ndefault = 200000\n'))
    git(root, "commit", "-qam", "declare the default")
    with api.session(api.load(root)) as loop:
        inc = loop.start()
        same = loop.submit_candidate(Candidate(inc.commit, params={"WORK": 200000}))
        other = loop.submit_candidate(Candidate(inc.commit, params={"WORK": 150000}))
    assert same.state is ExperimentState.INVALID
    assert "the incumbent's" in same.note
    assert other.state is ExperimentState.QUEUED


def test_a_grid_never_measures_the_base_commits_own_values(tiny_target: TinyFactory) -> None:
    """No `default` declared: the base's value comes from the file's own line, whatever its
    spelling, so the grid's point that holds it is never proposed."""
    root = tiny_target(budget=5, pairs=2, extra='[proposer.sweep]\nsampler = "grid"\n')
    cfg = (root / "assay.toml").read_text()
    (root / "assay.toml").write_text(cfg.replace("low = 1000\nhigh = 400000\nlog = true\n",
                                                 "choices = [200000, 400000, 800000]\n"))
    work = (root / "work.py").read_text()
    (root / "work.py").write_text(work.replace("WORK = 200000", "WORK = 2 * 10**5  # base"))
    git(root, "commit", "-qam", "a grid over WORK; the base spells its value")
    with api.session(api.load(root)) as loop:
        inc = loop.start()
        same = loop.submit_candidate(Candidate(inc.commit, params={"WORK": 200000}))
    assert same.state is ExperimentState.INVALID and "the incumbent's" in same.note
    api.run(root)
    swept = [e for e in api.log(root) if e["proposer"] == "sweep"]
    # both other points are slower: nothing is kept, the base stays the incumbent throughout
    assert sorted(e["params"]["WORK"] for e in swept) == [400000, 800000]
    assert all(e["state"] == "discarded" for e in swept)


def test_checks_must_pass_and_guards_must_hold(tiny_target: TinyFactory) -> None:
    checks = "import work, sys\nsys.exit(0 if work.WORK != 12345 else 1)\n"
    root = tiny_target(work=300_000, budget=2, pairs=4, name="g",
                       extra='[proposer.queue]\npath = "patches"\n',
                       files={"checks.py": checks})
    cfg = (root / "assay.toml").read_text().replace(
        "bench_timeout = 30", "bench_timeout = 30\nchecks = \"python3 checks.py\"")
    cfg = cfg.replace('protected = ["bench.py"]', 'protected = ["bench.py", "checks.py"]')
    (root / "assay.toml").write_text(cfg)
    git(root, "commit", "-qam", "checks")
    fails_checks = patch_work(root, 12345)
    (root / "work.py").write_text((root / "work.py").read_text()
                                  .replace("WORK = 300000", "WORK = 30000")
                                  .replace("MEM_KB = 100", "MEM_KB = 500"))
    fat = git(root, "diff")
    git(root, "checkout", "work.py")
    _queue(root, {"1.patch": ("breaks the checks", fails_checks),
                  "2.patch": ("faster but five times the memory", fat)})
    api.run(root, proposer="queue")
    log = {e["hypothesis"]: e for e in api.log(root)}
    assert log["breaks the checks"]["state"] == "invalid"
    assert "checks" in log["breaks the checks"]["note"]
    fat_exp = log["faster but five times the memory"]
    assert fat_exp["state"] == "discarded"
    assert "guard mem_kb regressed" in fat_exp["note"]
    assert fat_exp["decision"]["lo"] > 0  # the speed-up itself was real


def test_runs_record_roles_and_slots(tiny_target: TinyFactory) -> None:
    root = tiny_target(budget=2, slots=2, pairs=2)
    api.run(root)
    for e in api.log(root):
        runs = api.show(e["id"], root)["runs"]
        assert {r["role"] for r in runs} == {Role.INCUMBENT.value, Role.CANDIDATE.value}
        assert all(r["slot"] in ("s0", "s1") for r in runs)
    assert all(ExperimentState(e["state"]).is_finished() for e in api.log(root))


def test_candidates_naming_a_hypothesis_are_linked_to_it(tiny_target: TinyFactory) -> None:
    from assay.model import Candidate

    root = tiny_target(work=300_000, budget=1, pairs=4)
    target = api.load(root)
    with api.session(target) as loop:
        inc = loop.start()
        hid = loop.journal.add_hypothesis("less work per call", ["README.md:1"], "doc", 0.5)
        exp = loop.submit_candidate(Candidate(inc.commit, params={"WORK": 30_000},
                                              hypothesis=f"H{hid}: do a tenth of the work"))
        other = loop.submit_candidate(Candidate(inc.commit, params={"WORK": 40_000},
                                                hypothesis="H99: no such hypothesis"))
        assert exp.candidate.hypothesis_id == hid
        assert exp.candidate.sources == ("README.md:1",)
        assert other.candidate.hypothesis_id is None
        assert loop.journal.hypotheses()[0].status == "testing"
        loop.run(budget=2)
        status = loop.journal.hypotheses()[0].status
    assert api.show(exp.id, root)["state"] in ("kept", "discarded")
    assert status in ("supported", "refuted")


def test_a_failing_proposer_ends_the_run_with_an_error(tiny_target: TinyFactory) -> None:
    from typer.testing import CliRunner

    from assay.cli.app import app

    root = tiny_target(budget=2, pairs=2, extra='[proposer.queue]\npath = "patches"\n')
    (root / "patches").mkdir()
    (root / "patches" / "1.patch").write_text("# hypothesis: not a diff\nplain words\n")
    result = CliRunner().invoke(app, ["run", "--root", str(root), "--proposer", "queue"])
    assert result.exit_code == 1, result.output
    assert "the proposer failed" in result.output and "no unified diff" in result.output


def test_no_block_starts_that_the_time_budget_would_cut(tiny_target: TinyFactory) -> None:
    """With --max-hours, a block is started only if the recent blocks' pace says it ends in
    time: one the limit would cut is time spent for nothing. The pace is scripted here (the
    journal's block times rewritten), not the machine's."""
    import sqlite3

    root = tiny_target(budget=1, pairs=2)
    api.run(root)
    db = root / ".assay" / "journal.sqlite"

    def runs() -> int:
        with sqlite3.connect(db) as c:
            return int(c.execute("SELECT COUNT(*) FROM runs").fetchone()[0])

    with sqlite3.connect(db) as c:  # 600 s a run, an ABBA block 2,400 s
        c.execute("UPDATE blocks SET wall_s = 600.0 * length(run_order) WHERE state = 'done'")
    before = runs()
    short = api.run(root, budget=1, max_hours=0.5)
    assert "leaves" in short.stopped and "4 run(s) at about 600 s each" in short.stopped
    assert "not started" in short.stopped
    assert runs() == before  # nothing was started, so nothing was cut
    assert [e["state"] for e in api.log(root)][-1] == "queued"
    later = api.run(root, budget=0, max_hours=1.0)  # 3,600 s: the queued block fits
    assert runs() > before and later.finished == 2, later.stopped
