"""benchmarks/karpathy/finalists.py names a session's finalists from its real journal."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from assay import api

from .conftest import TinyFactory, git

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "karpathy" / "finalists.py"


@pytest.fixture(scope="module")
def finalists() -> ModuleType:
    spec = importlib.util.spec_from_file_location("finalists", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["finalists"] = mod
    spec.loader.exec_module(mod)
    return mod


def _grid(root: Path, choices: str, delta: str = "0.02") -> None:
    cfg = root / "assay.toml"
    cfg.write_text(cfg.read_text().replace("low = 1000\nhigh = 400000\nlog = true\n",
                                           f"choices = {choices}\n")
                   .replace("delta = 0.02", f"delta = {delta}"))
    git(root, "commit", "-qam", f"a grid over WORK {choices}")


def test_a_keep_is_the_first_finalist_and_the_base_the_last(
        tiny_target: TinyFactory, finalists: ModuleType) -> None:
    root = tiny_target(budget=5, pairs=2, extra='[proposer.sweep]\nsampler = "grid"\n')
    _grid(root, "[100000, 200000, 400000]")
    api.run(root)
    states = {e["params"]["WORK"]: e["state"] for e in api.log(root)}
    assert states[100000] == "kept"  # half the work: twice the speed
    picked, left = finalists.pick(root, top=2)
    assert left == []
    assert [f.label for f in picked][-1] == "base"
    first = picked[0]
    assert first.kept and first.knobs == {"WORK": 100000} and "final incumbent" in first.why
    assert picked[-1].knobs == {"WORK": 200000} and not picked[-1].kept
    assert all(not f.kept for f in picked[1:])


def test_gains_short_of_delta_are_finalists_ranked_by_their_lower_end(
        tiny_target: TinyFactory, finalists: ModuleType) -> None:
    # 180000 and 190000 loop steps instead of 200000: about 11% and 5% faster, both short
    # of a delta of 15%, so discarded when their runs are spent, their intervals above zero
    root = tiny_target(budget=5, pairs=2, extra='[proposer.sweep]\nsampler = "grid"\n')
    _grid(root, "[180000, 190000, 200000, 400000]", delta="0.15")
    api.run(root)
    log = {e["params"]["WORK"]: e for e in api.log(root)}
    for work in (180000, 190000):
        assert log[work]["state"] == "discarded" and log[work]["decision"]["lo"] > 0, log[work]
    picked, left = finalists.pick(root, top=2)
    assert [f.knobs["WORK"] for f in picked] == [180000, 190000, 200000]
    assert [f.label for f in picked] == [log[180000]["id"], log[190000]["id"], "base"]
    assert all(f.why.startswith("discarded: +") for f in picked[:2]) and left == []
    # with room for one besides the base, the lower of the two lower ends is left out
    picked, left = finalists.pick(root, top=1)
    assert [f.knobs["WORK"] for f in picked] == [180000, 200000]
    assert left == [f"{log[190000]['id']}: beyond --top 1"]
    assert finalists.main(["pick", str(root), "--top", "1"]) == 0


def test_flags_name_only_what_the_committed_file_does_not_hold(
        finalists: ModuleType) -> None:
    text = "TOTAL_BATCH_SIZE = 2**18  # tokens\nMATRIX_LR = 0.05\nCOMPILE = 'full'\n"
    got = finalists.flags({"TOTAL_BATCH_SIZE": 262144, "MATRIX_LR": 0.04,
                           "COMPILE": "full"}, text)
    assert got == {"MATRIX_LR": "0.04"}
    assert finalists.flags({"COMPILE": "none"}, text) == {"COMPILE": "'none'"}


def test_the_pipelines_base_is_examples_gpt_with_the_knobs_written_in(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("pipeline", SCRIPT.with_name("pipeline.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    config = SCRIPT.with_name("session.toml")
    repo = mod.base_repo(tmp_path, config, {"TIME_BUDGET": "30.0", "MATRIX_LR": "0.04"})
    text = (repo / "train.py").read_text()
    assert "\nTIME_BUDGET = 30.0\n" in text and "\nMATRIX_LR = 0.04\n" in text
    assert (repo / "assay.toml").read_text() == config.read_text()
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "log", "--format=%s").splitlines() == [
        "examples/gpt: TIME_BUDGET = 30.0, MATRIX_LR = 0.04"]
    # the session reads its base's values from that file: the grid skips the base's point
    from assay.config.spec import load
    from assay.repo.workspace import held_params

    target = load(repo)
    held = held_params(target.params, {}, lambda p: (repo / p).read_text())
    assert held["MATRIX_LR"] == 0.04 and held["DEVICE_BATCH_SIZE"] == 128
    with pytest.raises(SystemExit, match="exists"):
        mod.base_repo(tmp_path, config, {})


def test_a_kept_patch_cannot_be_written_as_values(tiny_target: TinyFactory,
                                                  finalists: ModuleType) -> None:
    from .conftest import patch_work

    root = tiny_target(work=300_000, budget=1, pairs=4,
                       extra='[proposer.queue]\npath = "patches"\n')
    folder = root / "patches"
    folder.mkdir()
    (folder / "1.patch").write_text("# hypothesis: a tenth of the work\n"
                                    + patch_work(root, 30_000))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "a patch")
    api.run(root, proposer="queue")
    assert [e["state"] for e in api.log(root)] == ["kept"]
    with pytest.raises(SystemExit, match="e0001 kept a patch"):
        finalists.pick(root)
