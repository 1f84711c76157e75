"""The llama.cpp study's parts that need no build: its patches' headers, the vendored tree
made a repository, the sdist unpacked, and the truth's paired effect on scripted values."""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "llamacpp_study.py"


@pytest.fixture(scope="module")
def study() -> ModuleType:
    spec = importlib.util.spec_from_file_location("llamacpp_study", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["llamacpp_study"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_every_patch_names_its_checks_and_one_must_fail(study: ModuleType) -> None:
    found = study.candidates([])
    assert len(found) == 9
    assert [c.name for c in found if c.expect == "invalid"] == ["09-wrong-flash-attn-mask-order"]
    for c in found:
        assert c.checks, c.name
        text = c.path.read_text()
        assert "diff --git a/ggml/src/ggml-cpu/" in text, c.name
        # the header says what, why and what the study found
        assert "# What:" in text and "# Why:" in text, c.name


def test_a_header_without_expect_is_refused(study: ModuleType, tmp_path: Path) -> None:
    bad = tmp_path / "x.patch"
    bad.write_text("# check: SOFT_MAX\ndiff --git a/f b/f\n")
    with pytest.raises(study.StudyError, match=r"expect: valid\|invalid"):
        study.read_candidate(bad)


def test_an_unknown_candidate_is_named(study: ModuleType) -> None:
    with pytest.raises(study.StudyError, match="no patch named nope"):
        study.candidates(["nope"])


def test_the_vendored_tree_becomes_a_repository(study: ModuleType, tmp_path: Path) -> None:
    src = tmp_path / "llama.cpp"
    (src / "ggml").mkdir(parents=True)
    (src / "ggml" / "a.c").write_text("int a;\n")
    # what the sdist ships: a submodule link to a folder it does not have
    (src / ".git").write_text("gitdir: ../../.git/modules/vendor/llama.cpp\n")
    study.make_repository(src)
    head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], text=True,
                          capture_output=True, check=True).stdout.strip()
    assert len(head) == 40
    status = subprocess.run(["git", "-C", str(src), "status", "--porcelain"], text=True,
                            capture_output=True, check=True).stdout
    assert status == ""
    study.make_repository(src)  # a second call keeps the commit
    again = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], text=True,
                           capture_output=True, check=True).stdout.strip()
    assert again == head


def _archive(path: Path, names: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in names.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_unpack_takes_the_vendored_folder(study: ModuleType, tmp_path: Path) -> None:
    archive = tmp_path / "pkg-1.0.tar.gz"
    _archive(archive, {"pkg-1.0/setup.py": b"", "pkg-1.0/vendor/llama.cpp/CMakeLists.txt": b"x"})
    dest = tmp_path / "out" / "llama.cpp"
    study.unpack(archive, "vendor/llama.cpp", dest)
    assert (dest / "CMakeLists.txt").read_text() == "x"
    assert not (tmp_path / "out" / "llama.cpp.tmp").exists()


def test_unpack_refuses_an_archive_without_the_folder(study: ModuleType, tmp_path: Path) -> None:
    archive = tmp_path / "pkg-1.0.tar.gz"
    _archive(archive, {"pkg-1.0/setup.py": b""})
    with pytest.raises(study.StudyError, match=r"vendor/llama\.cpp"):
        study.unpack(archive, "vendor/llama.cpp", tmp_path / "llama.cpp")


def test_paired_effect_is_percent_with_an_interval(study: ModuleType) -> None:
    inc = [100.0, 102.0, 98.0, 101.0, 99.0, 100.5, 99.5, 100.0]
    wiggle = [0.2, -0.3, 0.1, 0.0, -0.1, 0.3, -0.2, 0.0]
    faster = [a * 1.05 * (1 + w / 100) for a, w in zip(inc, wiggle, strict=True)]
    e = study.paired_effect(inc, faster)
    assert e.n == 8
    assert e.mean == pytest.approx(5.0, abs=0.1)
    assert 0 < e.low < 5.0 < e.high
    same = [a * (1 + w / 100) for a, w in zip(inc, wiggle, strict=True)]
    z = study.paired_effect(inc, same)
    assert z.low < 0 < z.high
    slower = study.paired_effect(faster, inc)  # positive means better: a loss is negative
    assert slower.high < 0


def _row(study: ModuleType, name: str, state: str, first: float | None = 300.0,
         later: tuple[float, ...] = (0.4, 0.5)) -> object:
    run = study.llamacpp_run
    return run.Row(name=name, exp="e0001", state=state, effect=0.05, lo=0.02, hi=0.08,
                   runs=8, first_build_s=first, later_build_s=later, checks_runs=1,
                   pp_change=-0.01, reason="")


def test_the_verdict_names_each_condition_it_misses(study: ModuleType) -> None:
    run = study.llamacpp_run
    pr = "metric tg128 ... | pp512 | this change alone | ..."
    good = [_row(study, "05-fuse", "kept"), _row(study, "06-prefetch", "discarded"),
            _row(study, "09-wrong", "invalid", later=())]
    ok, why = run.verdict(good, {"05-fuse": 0.03, "06-prefetch": -0.02},
                          {"05-fuse": 0.05, "06-prefetch": 0.0}, ["09-wrong"], 0.01, [pr])
    assert ok and why == []
    # a keep whose truth does not clear δ, a wrong change kept, a slow rebuild, a bare PR
    bad = [_row(study, "05-fuse", "kept", later=(0.4, 45.0)),
           _row(study, "09-wrong", "kept")]
    ok, why = run.verdict(bad, {"05-fuse": 0.005, "09-wrong": -0.1},
                          {"05-fuse": 0.02, "09-wrong": -0.05}, ["09-wrong"], 0.01,
                          ["metric tg128 only"])
    assert not ok
    text = "\n".join(why)
    assert "05-fuse was kept but its truth interval's low end +0.50% is not above δ 1%" in text
    assert "09-wrong was kept but its truth is -5.00%" in text
    assert "the wrong change 09-wrong is kept, not invalid" in text
    assert "05-fuse: a later build took 45.0 s, more than 10% of its first (300.0 s)" in text
    assert "a PR text lacks tg128 or pp512" in text
    # nothing kept: the conditions on keeps and PR texts hold vacuously
    ok, why = run.verdict([_row(study, "09-wrong", "invalid")], {}, {}, ["09-wrong"], 0.01,
                          [])
    assert ok and why == []
    ok, why = run.verdict([_row(study, "05-fuse", "kept")], {"05-fuse": 0.03},
                          {"05-fuse": 0.04}, [], 0.01, [])
    assert not ok and why == ["changes were kept but finalize wrote no PR text"]


def test_the_recipe_takes_the_study_settings(study: ModuleType) -> None:
    text = study.RECIPE.read_text()
    out = study.llamacpp_run.recipe_text(text, 1, 1, "1.1B q4_0")
    assert "-p 512 -n 128 -r 1 -fa 1 -t 1 -o json" in out
    assert out.count("-t 1 -fa on") == 2 and "-t 2" not in out
    assert 'model = "1.1B q4_0"' in out and 'model = "55M q4_0"' not in out
    assert study.llamacpp_run.recipe_text(text, 2, 3, "55M q4_0") == text


def test_ranks_in_the_brief_keep_fusions_apart(study: ModuleType) -> None:
    hyps = [{"text": "Fuse SOFT_MAX → ARGSORT → GET_ROWS in ggml-cpu"},
            {"text": "Fuse ROPE → SET_ROWS in ggml-cpu: ggml-cuda runs them as one kernel"},
            {"text": "ggml_compute_forward_soft_max_f32 takes 12% of the time"}]
    rank = study.llamacpp_run.rank_in_brief
    assert rank(hyps, "05-fuse-rope-set-rows") == 2
    assert rank(hyps, "01-soft-max-one-pass") == 3
    assert rank(hyps, "04-flash-attn-tile-fma") is None


def test_the_study_table_gives_mean_and_sd_of_both_sides(study: ModuleType) -> None:
    runs = {"A": {"tg128": [100.0, 102.0], "pp512": [500.0, 500.0]},
            "B": {"tg128": [110.0, 112.0], "pp512": [490.0, 510.0]}}
    lines = study.llamacpp_run.study_table(runs)
    assert lines[1].split()[:7] == ["pp512", "500.0", "±", "0.0", "500.0", "±", "14.1"]
    assert "+0.00%" in lines[1]
    assert lines[2].split()[:7] == ["tg128", "101.0", "±", "1.4", "111.0", "±", "1.4"]
    assert f"{111 / 101 - 1:+.2%}" in lines[2]


def test_the_run_time_leaves_out_pauses_it_knows_of(study: ModuleType) -> None:
    """A study stopped and resumed counts only the stretches its run step ran; one resumed
    from before the stretches were kept says its time runs from the first start."""
    now = time.time()
    net, exact = study.run_seconds({"run": now - 7200, "segments": [[now - 7200, now - 6600],
                                                                     [now - 900, now - 300]]})
    assert exact and net == pytest.approx(1200)
    gross, exact = study.run_seconds({"run": now - 7200, "earlier_unknown": True,
                                      "segments": [[now - 900, now - 300]]})
    assert not exact and gross == pytest.approx(7200, abs=5)
