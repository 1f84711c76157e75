"""`assay plan` with ``[fidelity]``: multi-fidelity sessions simulated with the decision code
a run uses, against deciding every candidate at the last level."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from assay import api
from assay.config.fidelity import FidelitySpec
from assay.config.spec import DecisionSpec
from assay.planning.fidelity import FidelityPlan, Scenario, level_costs, simulate
from assay.records import CalibrationRecord

FID = FidelitySpec("TIME_BUDGET", (30, 300))
SPEC = DecisionSpec()


def run(rho: float, fid: FidelitySpec = FID, seed: int = 0) -> FidelityPlan:
    sc = Scenario(fid, (30.0, 300.0), rho, (0.004, 0.004), candidates=16)
    return simulate(sc, SPEC, sessions=8, seed=seed)


def test_a_cheap_level_that_agrees_finds_the_keeps_for_fewer_device_hours() -> None:
    p = run(0.95)
    m, a = p.multi, p.last_only
    assert a.keeps > 1 and p.true_wins > 1  # the scenario has wins to find
    assert m.keeps >= 0.85 * a.keeps
    assert m.device_hours < 0.85 * a.device_hours
    # every candidate is screened cheap, fewer are decided at the last level
    assert m.decided[0] == 16 and m.decided[1] < 0.8 * a.decided[1]
    assert a.decided[1] == 16 and a.decided[0] == 0


@pytest.mark.parametrize("rho", [0.0, -0.5])
def test_a_cheap_level_that_disagrees_stops_true_wins(rho: float) -> None:
    good, bad = run(0.95), run(rho)
    # the same candidates (same seed): deciding all at the last level does not depend on ρ
    assert bad.last_only == good.last_only and bad.true_wins == good.true_wins
    assert bad.multi.missed_wins > bad.last_only.missed_wins + 1
    assert bad.multi.keeps < 0.75 * bad.last_only.keeps
    assert bad.multi.keeps < good.multi.keeps


def test_seeded_and_three_levels() -> None:
    assert run(0.8, seed=3) == run(0.8, seed=3)
    assert run(0.8, seed=3).last_only != run(0.8, seed=4).last_only
    three = FidelitySpec("TIME_BUDGET", (30, 120, 300), promote="top", top=2)
    p = simulate(Scenario(three, (30.0, 120.0, 300.0), 0.9, (0.004,) * 3, candidates=10),
                 SPEC, sessions=3)
    d = p.multi.decided
    assert d[0] == 10 and d[0] >= d[1] >= d[2] > 0
    with pytest.raises(ValueError, match="not a correlation"):
        simulate(Scenario(FID, (30.0, 300.0), 1.5, (0.01, 0.01)), SPEC, sessions=1)


def test_level_costs_from_pace_or_values() -> None:
    costs, why = level_costs(FID, [None, None])
    assert costs == (30.0, 300.0) and "no pace measured yet" in why
    costs, why = level_costs(FID, [45.0, None])
    assert costs == (45.0, 450.0) and "measured pace at TIME_BUDGET=30" in why
    costs, why = level_costs(FID, [45.0, 380.0])
    assert costs == (45.0, 380.0) and why == "measured pace of each level"
    with pytest.raises(ValueError, match="--level-costs"):
        level_costs(FidelitySpec("SIZE", ("small", "large")), [None, None])


CONFIG = '''
[metric]
name = "val_bpb"
direction = "minimize"
[commands]
bench = "python train.py"
[scope]
editable = ["train.py"]
[[params]]
name = "TIME_BUDGET"
type = "float"
low = 1
high = 1000
apply = "env"
[[params]]
name = "LR"
type = "float"
low = 0.001
high = 1
apply = "env"
'''


def test_the_cli_prints_the_multi_fidelity_plan(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    (tmp_path / "assay.toml").write_text(CONFIG + '[fidelity]\nparam = "TIME_BUDGET"\n'
                                         'levels = [30, 300]\n')
    cmd = [sys.executable, "-m", "assay", "plan", "-C", str(tmp_path), "--noise", "0.5%",
           "--trials", "10", "--sessions", "2", "--candidates", "6"]
    ok = subprocess.run([*cmd, "--rho", "0.7"], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    out = ok.stdout
    assert "fidelity plan: TIME_BUDGET=30 → TIME_BUDGET=300" in out
    assert "correlated ρ = 0.70 (given)" in out
    assert "cost per run: TIME_BUDGET=30 30 s, TIME_BUDGET=300 300 s" in out
    assert "multi-fidelity" in out and "all at TIME_BUDGET=300" in out
    assert "of the device-hours" in out
    bad = subprocess.run([*cmd, "--rho", "high"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--rho 'high' is not a number" in bad.stderr
    worse = subprocess.run([*cmd, "--rho", "2"], capture_output=True, text=True, timeout=300)
    assert worse.returncode == 2 and "not a correlation" in worse.stderr
    assert "Traceback" not in bad.stderr + worse.stderr
    (tmp_path / "assay.toml").write_text(CONFIG)
    plain = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0 and "fidelity" not in plain.stdout


def test_the_plan_uses_and_shows_the_agreement_measured_in_the_journal(tmp_path: Path) -> None:
    from assay import api
    from assay.model import LEVEL, SCREEN, Candidate, Decision, ExperimentState, Verdict

    (tmp_path / "train.py").write_text("")
    (tmp_path / "assay.toml").write_text(CONFIG + '[fidelity]\nparam = "TIME_BUDGET"\n'
                                         'levels = [30, 300]\n')
    j = api.open_journal(api.load(tmp_path))
    try:
        for k, (cheap, final) in enumerate([(0.03, 0.02), (0.02, 0.025), (0.01, -0.01),
                                            (0.025, 0.004)]):
            e = j.add_experiment(Candidate("c0", params={"LR": 0.01 * (k + 1)})).id
            for lv, eff, screen in ((0, cheap, "promoted"), (1, final, "")):
                details = {LEVEL: lv, **({SCREEN: screen} if screen else {})}
                verdict = Verdict.KEEP if eff > 0.01 else Verdict.DISCARD
                j.set_decision(e, Decision(verdict, "r", eff, eff - 0.005, eff + 0.005, 4, 8,
                                           0.01, details=details))
            # ended as the loop ends it: a level's outcome is what happened there
            j.set_state(e, ExperimentState.KEPT if final > 0.01 else ExperimentState.DISCARDED)
    finally:
        j.close()
    out = subprocess.run([sys.executable, "-m", "assay", "plan", "-C", str(tmp_path),
                          "--noise", "0.5%", "--trials", "10", "--sessions", "2",
                          "--candidates", "6"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    # ranks 4,2,1,3 against 3,4,1,2: Spearman's ρ = 0.4
    assert "correlated ρ = 0.40 (the rank agreement measured in the journal, over 4)" \
        in out.stdout
    assert ("measured: at TIME_BUDGET=30, 2 of 4 promoted candidates with a verdict at "
            "TIME_BUDGET=300 also won there; ρ = 0.40 over 4") in out.stdout


def test_each_level_is_planned_with_its_own_measured_noise(tmp_path: Path) -> None:
    """Without --noise the plan takes each level's noise from that level's calibration (the
    long runs are quieter), and says so; a level not measured yet takes the plan's."""
    (tmp_path / "train.py").write_text("")
    (tmp_path / "assay.toml").write_text(CONFIG + '[fidelity]\nparam = "TIME_BUDGET"\n'
                                         'levels = [30, 120, 300]\n')
    j = api.open_journal(api.load(tmp_path))
    try:
        j.set_calibration(CalibrationRecord(pooled=0.02 * math.sqrt(2), level=0), 0)
        j.set_calibration(CalibrationRecord(pooled=0.005 * math.sqrt(2), level=2), 2)
    finally:
        j.close()
    out = subprocess.run([sys.executable, "-m", "assay", "plan", "-C", str(tmp_path),
                          "--trials", "10", "--sessions", "2", "--candidates", "4"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert ("run noise per level: TIME_BUDGET=30 2.00%, TIME_BUDGET=120 2.00%, "
            "TIME_BUDGET=300 0.50% (measured at TIME_BUDGET=30, TIME_BUDGET=300; any other: "
            "the plan's)") in out.stdout
