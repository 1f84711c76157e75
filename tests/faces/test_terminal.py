"""What `assay` prints in a terminal: help, version, the run's lines and summary, config
errors, research hypotheses. Each test reads the printed text of a real command."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

import assay
from assay import api
from assay.config.spec import parse
from assay.errors import ConfigError
from assay.faces.terminal import (
    RunPrinter,
    experiment_parts,
    experiment_record,
    finished_in,
    number,
    print_hypotheses,
    print_row,
)
from assay.journal.store import Journal
from assay.loop.progress import Summary
from assay.model import Direction, Experiment, ExperimentState
from tests.conftest import patch_work

from .conftest import sh

LINE = re.compile(r"^e\d{4} (kept|discarded|invalid|crashed) ")


def assay_cli(*args: str, timeout: float = 180, env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "80", **(env or {})}
    return subprocess.run([sys.executable, "-m", "assay", *args], capture_output=True,
                          text=True, timeout=timeout, env=full)


def set_sweep(root: Path) -> None:
    cfg = root / "assay.toml"
    cfg.write_text(cfg.read_text().replace("budget = 20", 'budget = 20\nproposer = "sweep"'))
    sh(root, "git", "commit", "-qam", "sweep")


def test_help_keeps_bracketed_text() -> None:
    out = assay_cli("run", "--help").stdout
    assert "(default: [run] budget)" in out and "(default: [run] slots)" in out
    assert "-v, --verbose" in out and "--json" in out


def test_version() -> None:
    proc = assay_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"assay {assay.__version__}"
    assert assay.__version__


def test_quiet_run_prints_one_line_per_decided_experiment(bare_target: Path) -> None:
    set_sweep(bare_target)
    proc = assay_cli("run", "-C", str(bare_target), "--budget", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    decided = [ln for ln in lines if LINE.match(ln)]
    assert len(decided) == 3, proc.stdout
    for ln in decided:  # id verdict improvement interval runs seconds hypothesis
        assert re.match(r"^e\d{4} \w+ +(-|[+-]\d+\.\d\d%) +(-|\[[^\]]+\]) +\d+ runs +"
                        r"\d+\.\d s  \S", ln), ln
    assert "usable pair" not in proc.stdout and "queued" not in proc.stdout
    assert "1 slots" not in proc.stdout and "on 1 slot)" in proc.stdout
    body = lines[:lines.index(next(ln for ln in lines if "summary" in ln))]
    # one line per decided experiment, the calibration's, and the end's word on the trees
    said = ("pair noise", "kept s0-a, s0-b in .assay/worktrees")
    assert all(LINE.match(ln) or ln.startswith(said) for ln in body if ln), body
    assert "experiments: 3 finished (" in proc.stdout

    verbose = assay_cli("run", "-C", str(bare_target), "--budget", "2", "-v")  # a session
    assert verbose.returncode == 0, verbose.stderr
    assert "queued:" in verbose.stdout
    assert len([ln for ln in verbose.stdout.splitlines() if LINE.match(ln)]) == 2

    streamed = assay_cli("run", "-C", str(bare_target), "--budget", "2", "--json")
    assert streamed.returncode == 0, streamed.stderr
    records = [json.loads(ln) for ln in streamed.stdout.splitlines() if ln.strip()]
    exps = [r for r in records if r["type"] == "experiment"]
    assert [r["id"] for r in exps] == ["e0006", "e0007"]
    for r in exps:
        assert set(r) >= {"id", "hypothesis", "verdict", "effect", "lo", "hi", "runs",
                          "seconds"}
        assert r["runs"] >= 1 and r["seconds"] >= 0
    assert records[-1]["type"] == "summary" and records[-1]["finished"] == 7


def test_failed_calibration_prints_its_error_once_and_an_empty_summary(
        bare_target: Path) -> None:
    (bare_target / "knob.py").write_text("SIZE = 13\n")  # the benchmark exits 3
    cfg = bare_target / "assay.toml"
    cfg.write_text(cfg.read_text().replace("default = 32", "default = 13"))
    sh(bare_target, "git", "commit", "-qam", "broken")
    proc = assay_cli("run", "-C", str(bare_target), "--budget", "2")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert out.count("calibration failed") == 1, out
    assert "stopped: on the error above" in out
    assert "experiments: none finished" in out and "finished ()" not in out
    assert "baseline -" not in out and "best -" not in out
    assert "no change beat the incumbent" not in out


def test_no_progress_bar_before_an_error_found_at_start(bare_target: Path) -> None:
    proc = assay_cli("run", "-C", str(bare_target), "--proposer", "llm",
                     env={"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"})
    assert proc.returncode == 2
    assert "proposer.llm" in proc.stderr
    assert "experiments" not in proc.stdout and "━" not in proc.stdout


def test_progress_after_resume_counts_what_is_already_finished(ran_target: Path) -> None:
    target = api.load(ran_target)
    path = api.journal_path(target)
    assert finished_in(path) == 6
    console = Console(file=io.StringIO(), force_terminal=True, width=80)
    printer = RunPrinter(console, total=8, done_before=finished_in(path), journal_path=path)
    printer.on_event("start", "resumed", None)
    try:
        assert printer._progress is not None
        task = printer._progress.tasks[0]
        assert (task.completed, task.total) == (6, 8)
    finally:
        printer.close()


def test_ctrl_c_exits_130_after_a_clean_stop(bare_target: Path) -> None:
    set_sweep(bare_target)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "assay", "run", "-C", str(bare_target),
                             "--budget", "40"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    assert proc.stdout is not None
    seen = []
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        seen.append(line)
        if LINE.match(line) or time.monotonic() > deadline:
            break
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    out = "".join(seen) + rest
    assert proc.returncode == 130, out
    assert "stopped: stopped by SIGINT" in out


CONFIG = """\
[metric]
name = "speed"

[commands]
bench = "python bench.py"
{commands}
[scope]
editable = ["*.py"]
{extra}"""


def _config_error(commands: str = "", extra: str = "") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(CONFIG.format(commands=commands, extra=extra), Path("/tmp"), "assay.toml")
    return info.value


def test_unknown_key_lists_every_valid_key_of_its_section() -> None:
    exc = _config_error(commands='chekcs = "python checks.py"\n')
    text = str(exc)
    assert exc.line == 6 and "did you mean 'checks'?" in text
    for key in ("bench", "bench_timeout", "build", "checks", "checks_timeout", "holdout"):
        assert key in exc.valid.split(", "), exc.valid


def test_misspelled_section_has_its_line() -> None:
    exc = _config_error(extra='\n[decison]\nrule = "fixed"\n')
    assert exc.line == 10 and "assay.toml:10:" in str(exc)
    assert "did you mean 'decision'?" in str(exc)


def test_delta_given_as_a_percentage_is_refused_with_the_fraction_to_write() -> None:
    exc = _config_error(extra="\n[decision]\ndelta = 5\n")
    assert exc.key == "decision.delta" and exc.line == 11
    assert "500%" in str(exc) and "delta = 0.05" in str(exc)
    parse(CONFIG.format(commands="", extra="\n[decision]\ndelta = 0.05\n"), Path("/tmp"))


def test_research_hypotheses_never_cut_a_citation_at_80_columns() -> None:
    url = "https://arxiv.org/abs/2401.00001v3#section-4.2-cache-oblivious-blocking-for-counters"
    hyps = [SimpleNamespace(id=3, source_kind="paper", score=0.82, sources=(url, "doc:x.md"),
                            text="Cache-oblivious blocking of the counter update loop "
                                 "keeps the working set in L1 and halves the misses")]
    buf = io.StringIO()
    print_hypotheses(Console(file=buf, width=80, force_terminal=False), hyps)
    out = buf.getvalue()
    assert url in out and "…" not in out
    assert "halves the misses" in out.replace("\n", " ")


def test_log_pages_newest_first_with_setup_seconds(ran_target: Path) -> None:
    proc = assay_cli("log", "-C", str(ran_target), "--limit", "2", "--offset", "1")
    assert proc.returncode == 0, proc.stderr
    ids = [ln.split()[0] for ln in proc.stdout.splitlines()[1:]]
    assert ids == ["e0005", "e0004"]
    assert "setup" in proc.stdout.splitlines()[0]
    assert re.search(r" \d+\.\d s  ", proc.stdout.splitlines()[1])
    oldest = assay_cli("log", "-C", str(ran_target), "--oldest").stdout.splitlines()[1:]
    assert [ln.split()[0] for ln in oldest] == [f"e000{i}" for i in range(1, 7)]
    assert assay_cli("log", "-C", str(ran_target), "--limit", "-1").returncode == 2


def test_show_gives_each_blocks_build_and_checks_time(ran_target: Path) -> None:
    proc = assay_cli("show", "e0001", "-C", str(ran_target))
    assert proc.returncode == 0, proc.stderr
    blocks = [ln for ln in proc.stdout.splitlines() if re.match(r"^  e0001-b\d ", ln)]
    assert blocks, proc.stdout
    for ln in blocks:
        assert re.search(r"wall \d+\.\d\d s, (build \d|build\+checks \d)", ln), ln


def _experiments(root: Path) -> dict[str, Experiment]:
    journal = api.open_journal(api.load(root), readonly=True)
    try:
        return {e.id: e for e in journal.experiments()}
    finally:
        journal.close()


def test_a_remeasurement_after_a_keep_is_announced(ran_target: Path) -> None:
    exps = _experiments(ran_target)
    moved = ("e0002: the incumbent moved to 0123456789ab (e0001); its 2 pair(s) against the "
             "old one, +5.81% are set aside and it is measured again against the new one")

    def printed(verbose: bool = False, as_json: bool = False) -> str:
        buf = io.StringIO()
        printer = RunPrinter(Console(file=buf, width=200), out=buf, verbose=verbose,
                             as_json=as_json)
        printer.on_event("rebase", moved, exps["e0002"])
        printer.on_event("discarded", "e0002 discarded", exps["e0002"])
        printer.on_event("discarded", "e0003 crashed", exps["e0003"])
        return buf.getvalue()

    quiet = printed().splitlines()
    assert len(quiet) == 2 and "set aside" not in quiet[0]
    assert LINE.match(quiet[0]) and "(re-measured after a keep) grow SIZE" in quiet[0]
    assert "re-measured" not in quiet[1]
    verbose = printed(verbose=True)
    assert moved in verbose and "(re-measured after a keep)" in verbose
    records = [json.loads(ln) for ln in printed(as_json=True, verbose=True).splitlines()]
    assert [r.get("remeasured") for r in records if r["type"] == "experiment"] == [True, False]
    assert any(r["type"] == "event" and r["kind"] == "rebase" for r in records)


def test_summary_writes_rates_with_si_prefixes_and_keeps_kept_lines_whole(
        ran_target: Path) -> None:
    exps = _experiments(ran_target)
    long = dataclasses.replace(exps["e0001"], candidate=dataclasses.replace(
        exps["e0001"].candidate, hypothesis="halve SIZE " + "so that every item costs less " * 6
        + "END"))
    summary = Summary(baseline=1_422_000.0, best=8_331_000.0, kept=[long], finished=6,
                      counts={"kept": 1, "discarded": 5}, stopped="done", branch="assay/x")
    buf = io.StringIO()
    printer = RunPrinter(Console(file=buf, width=80))  # a pipe: nothing wrapped or cut
    printer.summary(summary, "throughput", "words/s", Direction.MAXIMIZE)
    out = buf.getvalue()
    assert "baseline 1.422M words/s -> best 8.331M words/s" in out and "e+06" not in out
    kept = next(ln for ln in out.splitlines() if ln.startswith("  e0001 "))
    assert kept.endswith("END") and len(kept) > 80
    assert number(0.9812) == "0.9812" and number(939_400.0, "it/s") == "939.4k it/s"


def test_show_says_when_the_incumbent_moved_and_the_pairs_were_set_aside(
        ran_target: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from assay.cli import app as cli

    real = api.show("e0002", ran_target)
    first = dict(real["decisions"][0], verdict="continue", pairs_used=2)
    more = dict(first, pairs_used=4)
    runner = CliRunner()

    def shown(data: dict[str, object]) -> str:
        monkeypatch.setattr(cli.api, "show", lambda *a, **k: data)
        result = runner.invoke(cli.app, ["show", "e0002", "-C", str(ran_target)])
        assert result.exit_code == 0, result.output
        return result.output

    # Two blocks against two incumbents, the pairs counted again from 2.
    blocks = [dict(real["blocks"][0]), dict(real["blocks"][0], id="e0002-b9",
                                            incumbent={"commit": "f" * 40})]
    out = shown({**real, "blocks": blocks, "decisions": [first, more, first, more]})
    assert out.count("the incumbent moved (a keep): measured again against the new one") == 1
    lines = out.splitlines()
    at = next(i for i, ln in enumerate(lines) if "the incumbent moved" in ln)
    assert "4 pairs" in " ".join(lines[:at]) and "2 pairs" in " ".join(lines[at:at + 3])
    # One incumbent throughout: nothing is said.
    assert "incumbent moved" not in shown({**real, "decisions": [first, more]})


def test_status_counts_in_the_singular(ran_target: Path, monkeypatch: pytest.MonkeyPatch
                                       ) -> None:
    from typer.testing import CliRunner

    from assay.cli import app as cli

    real = api.status(ran_target)
    one = {**real, "experiments": 1, "counts": {"kept": 1}, "baseline": 1_422_000.0,
           "best": 8_331_000.0, "unit": "words/s"}
    monkeypatch.setattr(cli.api, "status", lambda *a, **k: one)
    out = CliRunner().invoke(cli.app, ["status", "-C", str(ran_target)]).output
    assert "1 experiment: kept 1" in out and "1 experiments" not in out
    assert "baseline 1.422M words/s, best 8.331M words/s" in out


def test_an_80_column_terminal_wraps_the_hypothesis_and_never_cuts_it(ran_target: Path) -> None:
    exps = _experiments(ran_target)
    hyp = "sweep (tpe): CHUNK=1, CACHE_SIZE=1024, COUNTER=counter and a longer tail END"
    long = dataclasses.replace(exps["e0001"], candidate=dataclasses.replace(
        exps["e0001"].candidate, hypothesis=hyp))
    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=True, color_system=None)
    print_row(console, *experiment_parts(experiment_record(long, 12)))
    summary = Summary(baseline=1.0, best=2.0, kept=[long], finished=1, counts={"kept": 1},
                      stopped="done", branch="assay/x")
    RunPrinter(console).summary(summary, "speed", "", Direction.MAXIMIZE)
    out = buf.getvalue()
    assert "…" not in out and all(len(ln) <= 80 for ln in out.splitlines())
    first = out.splitlines()[0]
    assert LINE.match(first) and " 12 runs " in first
    assert out.count("and a longer tail END") == 2 and out.count("CACHE_SIZE=1024,") == 2
    wrapped = [ln for ln in out.splitlines() if ln.startswith("      ")]
    assert len(wrapped) >= 2  # the line went on under the id, once per place it is printed


LONG_CHECKS = """\
import sys, work
if work.WORK == 12345:
    print("FAILED tests/test_work.py::test_the_work_constant_keeps_its_documented_value - x")
    print("FAILED tests/test_work.py::test_the_checksum_matches_the_reference_table - y")
    sys.exit(1)
"""


def _queued_patch(root: Path, hypothesis: str, diff: str) -> None:
    (root / "patches").mkdir()
    (root / "patches" / "1.patch").write_text(f"# hypothesis: {hypothesis}\n{diff}")


def test_a_long_reason_is_cut_at_a_word_and_points_to_show(tiny_target: Any) -> None:
    root = tiny_target(budget=1, extra='[proposer.queue]\npath = "patches"\n',
                       files={"checks.py": LONG_CHECKS})
    cfg = root / "assay.toml"
    cfg.write_text(cfg.read_text().replace(
        "bench_timeout = 30\n", f'bench_timeout = 30\nchecks = "{sys.executable} checks.py"\n')
        .replace('protected = ["bench.py"]', 'protected = ["bench.py", "checks.py"]')
        .replace("[run]\n", "[run]\nverify = false\n"))
    sh(root, "git", "commit", "-qam", "checks")
    _queued_patch(root, "an unlucky constant", patch_work(root, 12345))
    sh(root, "git", "add", "-A")
    sh(root, "git", "commit", "-qm", "the patch")
    proc = assay_cli("run", "-C", str(root), "--proposer", "queue")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("e0001 invalid"))
    reason = api.show("e0001", root)["note"].splitlines()[0]
    assert len(reason) > 120
    shown = line.split("an unlucky constant (", 1)[1]
    assert shown.endswith("…; see `assay show e0001`)"), line
    kept = shown.split("…", 1)[0]
    assert reason.startswith(kept) and len(kept) <= 120
    assert reason[len(kept)] in " ,;:(", (kept, reason)  # cut between words


def test_checks_failing_on_the_incumbent_stop_before_any_noise_is_measured(
        tiny_target: Any) -> None:
    root = tiny_target(budget=1)
    cfg = root / "assay.toml"
    cfg.write_text(cfg.read_text().replace(
        "bench_timeout = 30\n", 'bench_timeout = 30\nchecks = "exit 1"\n')
        .replace("aa_blocks = 0", "aa_blocks = 2"))
    sh(root, "git", "commit", "-qam", "checks fail")
    proc = assay_cli("run", "-C", str(root), "-v")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "error:" in out and "incumbent" in out, out
    assert "measuring noise" not in out and "A/A" not in out, out


def test_a_table_piped_to_a_file_keeps_every_value_whole(ran_target: Path) -> None:
    from assay.faces.terminal import number

    for exp in api.log(ran_target):
        data = api.show(exp["id"], ran_target)
        if not data["runs"]:
            continue
        proc = assay_cli("show", exp["id"], "-C", str(ran_target), env={"COLUMNS": "40"})
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert "…" not in proc.stdout, proc.stdout
        for r in data["runs"]:
            row = next(ln for ln in lines if r["run_id"] in ln)
            metrics = ", ".join(f"{k}={number(v)}" for k, v in r["metrics"].items())
            assert metrics in row and r["reason"] in row, (row, r)


def test_show_gives_a_sweep_candidate_the_diff_of_the_file_it_rewrote(tiny_target: Any) -> None:
    root = tiny_target(work=200_000, budget=1)
    api.run(root, proposer="sweep")
    exp = api.log(root)[0]
    assert exp["params"] and not exp["patch_chars"]
    proc = assay_cli("show", exp["id"], "-C", str(root))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "--- a/work.py\n+++ b/work.py\n" in out, out
    assert "\n-WORK = 200000\n" in out and f"\n+WORK = {exp['params']['WORK']}\n" in out, out


def test_an_overridden_aa_blocks_is_announced_once_with_its_reason(tiny_target: Any) -> None:
    root = tiny_target(budget=1)
    cfg = root / "assay.toml"
    cfg.write_text(cfg.read_text().replace("aa_blocks = 0", "aa_blocks = 1"))
    sh(root, "git", "commit", "-qam", "one A/A block")
    first = assay_cli("run", "-C", str(root))
    assert first.returncode == 0, first.stdout + first.stderr
    said = [ln for ln in first.stdout.splitlines() if "aa_blocks" in ln]
    assert said == ["warning: [decision] aa_blocks = 1 is overridden: 6 per slot, because a "
                    "stable noise estimate needs at least 12 A/A pairs, and 1 block(s) of 2 "
                    "pair(s) on 1 slot(s) give 2"], first.stdout
    again = assay_cli("run", "-C", str(root), "--budget", "1")  # calibrated: nothing to say
    assert again.returncode == 0 and "aa_blocks" not in again.stdout, again.stdout
    # a default that is raised was configured by nobody: nothing to announce
    other = tiny_target(budget=1, name="default")
    cfg = other / "assay.toml"
    cfg.write_text(cfg.read_text().replace("aa_blocks = 0\n", ""))
    sh(other, "git", "commit", "-qam", "the default A/A blocks")
    quiet = assay_cli("run", "-C", str(other))
    assert quiet.returncode == 0 and "aa_blocks" not in quiet.stdout, quiet.stdout


def test_a_conflict_says_its_files_and_is_counted_among_the_finished(ran_target: Path) -> None:
    exps = _experiments(ran_target)
    note = "conflict: b.py: the patch and the incumbent 0123456789ab change the same lines"
    clash = dataclasses.replace(exps["e0001"], state=ExperimentState.CONFLICT, note=note)
    head, text = experiment_parts(experiment_record(clash, 0))
    assert head.split()[1] == "conflict" and text.endswith(f"({note})")
    buf = io.StringIO()
    summary = Summary(baseline=1.0, best=1.0, kept=[], finished=2,
                      counts={"discarded": 1, "conflict": 1}, stopped="done", branch="assay/x")
    RunPrinter(Console(file=buf, width=120, color_system=None)).summary(
        summary, "speed", "", Direction.MAXIMIZE)
    assert "experiments: 2 finished (conflict 1, discarded 1)" in buf.getvalue()


def test_an_experiment_line_gives_the_time_its_blocks_ran_not_its_age(
        ran_target: Path) -> None:
    """An experiment proposed before a stop and decided after the resume: its line gives the
    seconds its blocks ran, summed from the journal, not the hours it waited across the
    stop (the same number `assay show` gives its blocks)."""
    target = api.load(ran_target)
    path = api.journal_path(target)
    j = Journal.open(path)
    try:
        exp = next(e for e in j.experiments() if e.state.is_finished() and j.blocks(e.id))
        walls = sum(b.wall_s or 0.0 for b in j.blocks(exp.id))
    finally:
        j.close()
    waited = dataclasses.replace(exp, created_at=exp.updated_at - 3 * 3600)
    buf = io.StringIO()
    printer = RunPrinter(Console(file=buf, width=200), out=buf, as_json=True,
                         journal_path=path)
    printer.on_event(exp.state.value, "decided", waited)
    printer.close()
    rec = json.loads(buf.getvalue().splitlines()[-1])
    assert rec["id"] == exp.id and 0 < walls < 3600
    assert rec["seconds"] == pytest.approx(walls, abs=1e-3)
