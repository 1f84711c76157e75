"""`assay init`: each layout is detected, rendered, and the rendered file parses."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from assay.config.spec import parse
from assay.errors import ConfigError
from assay.init.write import (
    InitPlan,
    apply_answers,
    ask_plan,
    detect,
    guess_direction,
    render,
    write_config,
)
from assay.model import Direction


def make(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def roundtrip(plan: InitPlan) -> str:
    text = render(plan)
    parse(text, plan.root)
    return text


PI = {
    "autoresearch.sh": "#!/bin/bash\nset -e\npython bench/run.py --quick\n"
                       'echo "METRIC total_ms=$ms"\n',
    "bench/run.py": 'print(f"METRIC total_ms={t}")\nprint(f"METRIC peak_mb={m}")\n',
    "autoresearch.checks.sh": "#!/bin/bash\npytest -q\n",
    "autoresearch.md": "# Session\nMake it fast.\n",
    "lib/engine.c": "int main(void) { return 0; }\n",
}


def test_pi_autoresearch(tmp_path: Path) -> None:
    plan = detect(make(tmp_path, PI))
    assert plan.layout == "pi-autoresearch" and plan.complete
    assert plan.metric == "total_ms" and plan.direction == "minimize"
    assert plan.bench == "bash autoresearch.sh"
    assert plan.checks == "bash autoresearch.checks.sh"
    assert plan.brief == "autoresearch.md"
    assert {"autoresearch.sh", "autoresearch.checks.sh", "bench/run.py"} <= set(plan.protected)
    assert plan.other_metrics == (("peak_mb", "minimize"),)
    assert any("guessed" in n for n in plan.notes)
    assert plan.editable == ("lib/**/*.c",)
    text = roundtrip(plan)
    assert "# [[guards]]" in text and 'name = "total_ms"' in text
    target = parse(text, tmp_path)
    assert target.metric.direction is Direction.MINIMIZE
    assert target.metric.reader == "metric_lines"


def test_pi_autoresearch_without_metric_lines(tmp_path: Path) -> None:
    plan = detect(make(tmp_path, {"autoresearch.sh": "./run\n", "main.py": "x = 1\n"}))
    assert plan.layout == "pi-autoresearch"
    assert plan.missing == ("metric",)
    text = roundtrip(plan)
    assert "TODO" in text


KARPATHY = {
    "train.py": 'import torch\nprint("---")\nprint(f"val_bpb:          {val_bpb:.6f}")\n'
                'print(f"training_seconds: {t:.1f}")\nprint(f"peak_vram_mb:     {m:.1f}")\n',
    "prepare.py": "# data and evaluation\n",
    "program.md": "# autoresearch\n",
    "pyproject.toml": '[project]\nname = "autoresearch"\n',
    "uv.lock": "",
}


def test_karpathy_autoresearch(tmp_path: Path) -> None:
    plan = detect(make(tmp_path, KARPATHY))
    assert plan.layout == "autoresearch" and plan.complete
    assert (plan.metric, plan.direction, plan.reader) == ("val_bpb", "minimize",
                                                          "summary_block")
    assert plan.editable == ("train.py",)
    assert set(plan.protected) == {"prepare.py", "program.md"}
    assert plan.brief == "program.md" and plan.bench == "uv run train.py"
    assert plan.guards == (("peak_vram_mb", "minimize"),)
    target = parse(roundtrip(plan), tmp_path)
    assert target.metric.reader == "summary_block"
    assert target.bench.timeout_s == 600.0  # the brief's 10 minutes
    assert target.decision.rule == "expensive" and target.decision.delta == 0.003
    assert [g.name for g in target.guards] == ["peak_vram_mb"]
    assert target.guards[0].unit == "MB"
    assert target.is_protected("prepare.py") and target.is_editable("train.py")


def test_karpathy_other_metric_name(tmp_path: Path) -> None:
    plan = detect(make(tmp_path, {"train.py": 'print("---")\nprint(f"accuracy: {a}")\n'}))
    assert plan.metric == "accuracy" and plan.direction == "maximize"
    assert plan.bench == "python train.py"
    roundtrip(plan)


def test_pytest_and_pyproject(tmp_path: Path) -> None:
    make(tmp_path, {"pyproject.toml": '[project]\nname = "pkg"\n\n[tool.pytest.ini_options]\n',
                    "src/pkg/__init__.py": "", "tests/test_a.py": "def test(): pass\n"})
    plan = detect(tmp_path)
    assert plan.layout == "pytest"
    assert plan.checks == "python -m pytest -q"
    assert plan.editable == ("src/**/*.py",)
    assert "tests/**" in plan.protected
    assert plan.missing == ("metric", "bench")
    target = parse(roundtrip(plan), tmp_path)
    assert target.checks is not None and target.checks.cmd == "python -m pytest -q"


def test_pyproject_flat_package(tmp_path: Path) -> None:
    make(tmp_path, {"pyproject.toml": '[project]\nname = "my-pkg"\n',
                    "my_pkg/core.py": "x = 1\n"})
    plan = detect(tmp_path)
    assert plan.layout == "pyproject" and plan.editable == ("my_pkg/**/*.py",)
    roundtrip(plan)


def test_cmake(tmp_path: Path) -> None:
    make(tmp_path, {"CMakeLists.txt": "project(x)\nenable_testing()\nadd_test(t t)\n",
                    "src/a.cpp": "", "src/a.h": "", "build/junk.cpp": ""})
    plan = detect(tmp_path)
    assert plan.layout == "cmake"
    assert plan.build.startswith("cmake -S . -B build")
    assert plan.checks.startswith("ctest")
    assert plan.editable == ("src/**/*.cpp", "src/**/*.h")
    target = parse(roundtrip(plan), tmp_path)
    assert target.build is not None and "cmake --build" in target.build.cmd


def _fake_tool(folder: Path, name: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text('#!/bin/sh\nexec "$@"\n')
    (folder / name).chmod(0o755)


@pytest.mark.parametrize("build_file", ["CMakeLists.txt", "Makefile"])
def test_init_suggests_ccache_or_uses_it(tmp_path: Path, build_file: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    files = {build_file: "project(x)\n" if build_file == "CMakeLists.txt" else "all:\n",
             "src/a.c": ""}
    root = make(tmp_path / "p", files)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no ccache anywhere
    plan = detect(root)
    assert "ccache" not in plan.build
    assert any("install ccache" in n for n in plan.notes), plan.notes
    _fake_tool(tmp_path / "bin", "ccache")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    plan = detect(root)
    want = "-DCMAKE_C_COMPILER_LAUNCHER=ccache" if build_file == "CMakeLists.txt" \
        else 'CC="ccache cc"'
    assert want in plan.build, plan.build
    assert not any("install ccache" in n for n in plan.notes), plan.notes
    parse(roundtrip(plan), root)


def test_nothing_detected_still_renders(tmp_path: Path) -> None:
    plan = detect(tmp_path)
    assert not plan.detected and plan.missing == ("metric", "bench", "editable")
    assert "nothing recognised" in plan.describe()
    text = roundtrip(plan)
    assert text.count("TODO") >= 3


def test_every_key_is_commented(tmp_path: Path) -> None:
    text = render(detect(make(tmp_path, PI)))
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "=" in line and not line.startswith(("#", "[")):
            assert lines[i - 1].startswith("#") or "#" in line, line


def scripted(answers: list[str]) -> tuple[list[tuple[str, str]], object]:
    asked: list[tuple[str, str]] = []
    it: Iterator[str] = iter(answers)

    def prompt(question: str, default: str) -> str:
        asked.append((question, default))
        answer = next(it)
        return default if answer == "" else answer

    return asked, prompt


def test_ask_plan_with_scripted_prompt(tmp_path: Path) -> None:
    make(tmp_path, {"lib/a.c": "", "include/a.h": ""})
    asked, prompt = scripted(["latency_ms", "", "json", "results.0.latency_ms",
                              "./bench --json", "lib/*.c, include/*.h", "make test", ""])
    plan = ask_plan(tmp_path, prompt)  # type: ignore[arg-type]
    assert asked[1][1] == "minimize"  # the default offered is the guess from the name
    assert plan.metric == "latency_ms" and plan.direction == "minimize"
    assert plan.reader == "json" and plan.json_path == "results.0.latency_ms"
    assert plan.editable == ("lib/*.c", "include/*.h") and plan.checks == "make test"
    assert plan.complete
    target = parse(roundtrip(plan), tmp_path)
    assert target.metric.json_path == "results.0.latency_ms"
    assert target.bench.cmd == "./bench --json"


def test_ask_plan_offers_detected_defaults(tmp_path: Path) -> None:
    make(tmp_path, PI)
    asked, prompt = scripted(["", "", "", "", "", "", ""])
    plan = ask_plan(tmp_path, prompt)  # type: ignore[arg-type]
    assert [d for _, d in asked][:4] == ["total_ms", "minimize", "metric_lines",
                                         "bash autoresearch.sh"]
    assert plan.metric == "total_ms" and plan.checks == "bash autoresearch.checks.sh"


def test_ask_plan_aliases_and_retries(tmp_path: Path) -> None:
    make(tmp_path, {"a.py": ""})
    _, prompt = scripted(["score", "sideways", "max", "lines", "python b.py", "a.py", "", ""])
    plan = ask_plan(tmp_path, prompt)  # type: ignore[arg-type]
    assert plan.direction == "maximize" and plan.reader == "metric_lines"
    assert plan.checks == ""
    _, bad = scripted(["score", "up", "up", "up"])
    with pytest.raises(ConfigError, match="maximize, minimize"):
        ask_plan(tmp_path, bad)  # type: ignore[arg-type]


def test_write_config(tmp_path: Path) -> None:
    plan = detect(make(tmp_path, KARPATHY))
    path = write_config(tmp_path, plan)
    assert path == tmp_path / "assay.toml" and path.read_text() == render(plan)
    with pytest.raises(ConfigError, match="already exists"):
        write_config(tmp_path, plan)
    assert write_config(tmp_path, plan, force=True) == path


def test_strings_are_escaped(tmp_path: Path) -> None:
    plan = InitPlan(root=tmp_path, metric='we"ird\\name', bench="echo 'a\"b'\t\x7f\n",
                    editable=("src/é/**",), brief="")
    target = parse(roundtrip(plan), tmp_path)
    assert target.metric.name == 'we"ird\\name'
    assert target.bench.cmd == "echo 'a\"b'\t\x7f\n"
    assert target.editable == ("src/é/**",)


@pytest.mark.parametrize(("name", "direction"), [
    ("total_ms", "minimize"), ("latency", "minimize"), ("val_bpb", "minimize"),
    ("train-loss", "minimize"), ("peak_kb", "minimize"), ("throughput", "maximize"),
    ("tokens_per_s", "maximize"), ("ms_per_token", "minimize"), ("accuracy", "maximize"),
    ("msgs", "maximize"), ("wall_time_s", "minimize"),
])
def test_guess_direction(name: str, direction: str) -> None:
    assert guess_direction(name)[0] == direction


AUTO = {
    ".auto/measure.sh": "#!/bin/bash\nset -e\npython bench.py\n",
    ".auto/checks.sh": "#!/bin/bash\npython -m pytest -q\n",
    ".auto/prompt.md": "# Make parsing fast\n",
    ".auto/log.jsonl": '{"type": "config", "name": "s", "metricName": "parse_ms"}\n',
    "bench.py": 'print(f"METRIC parse_ms={ms}")\n',
    "src/lib/parse.py": "x = 1\n",
    "pyproject.toml": '[project]\nname = "lib"\n',
}


def test_pi_autoresearch_current_layout(tmp_path: Path) -> None:
    plan = detect(make(tmp_path, AUTO))
    assert plan.layout == "pi-autoresearch" and plan.complete
    assert plan.bench == "bash .auto/measure.sh" and plan.checks == "bash .auto/checks.sh"
    assert plan.brief == ".auto/prompt.md" and plan.metric == "parse_ms"
    assert ".auto/**" in plan.protected and "bench.py" in plan.protected
    target = parse(roundtrip(plan), tmp_path)
    assert target.is_protected(".auto/log.jsonl") and target.is_editable("src/lib/parse.py")


def _init_cli(root: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "assay", "init", "-C", str(root), *flags],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})


def test_init_without_a_terminal_writes_what_it_detected(tmp_path: Path) -> None:
    r = _init_cli(make(tmp_path, AUTO))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "found: .auto/measure.sh: a pi-autoresearch benchmark" in r.stdout
    assert "Aborted" not in r.stdout + r.stderr
    assert parse((tmp_path / "assay.toml").read_text(), tmp_path).metric.name == "parse_ms"


def test_init_without_a_terminal_names_each_missing_answer(tmp_path: Path) -> None:
    make(tmp_path, {"CMakeLists.txt": "project(x)\nadd_executable(bench src/bench.c)\n",
                    "src/bench.c": "int main(void) { return 0; }\n"})
    r = _init_cli(tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    out = " ".join((r.stdout + r.stderr).split())
    assert "missing metric (--metric ...), bench (--bench ...)" in out
    assert not (tmp_path / "assay.toml").exists()
    r = _init_cli(tmp_path, "--metric", "ns_per_op", "--bench", "./build/bench")
    assert r.returncode == 0, r.stdout + r.stderr
    target = parse((tmp_path / "assay.toml").read_text(), tmp_path)
    assert target.metric.direction is Direction.MINIMIZE
    assert target.build is not None and target.build.cmd.endswith("--target bench")
    assert f"-j {os.cpu_count() or 1}" in target.build.cmd  # one slot: every CPU
    assert target.editable == ("src/*",)


def test_cmake_builds_only_the_bench_targets_and_scopes_editable(tmp_path: Path) -> None:
    make(tmp_path, {
        "CMakeLists.txt": "project(x)\nenable_testing()\nadd_subdirectory(ggml)\n"
                          "add_subdirectory(tests)\n",
        "ggml/CMakeLists.txt": "add_library(ggml-cpu src/ggml-cpu/ops.cpp)\n"
                               "add_library(ggml-cuda src/ggml-cuda/mm.cu)\n",
        "ggml/src/ggml-cpu/ops.cpp": "", "ggml/src/ggml-cuda/mm.cu": "",
        "tests/CMakeLists.txt": "add_executable(test-ops test-ops.cpp)\n"
                                "target_link_libraries(test-ops PRIVATE ggml-cpu)\n",
        "tests/test-ops.cpp": ""})
    plan = apply_answers(detect(tmp_path), {"metric": "us", "bench": "./build/bin/test-ops perf"})
    assert plan.build.endswith("--target test-ops")
    assert plan.editable == ("ggml/src/ggml-cpu/*",)  # not the GPU backends, not the test
    parse(roundtrip(plan), tmp_path)


TRAIN = """\
import os
LR_MULT = 1.0  # multiplies every learning rate
TOTAL_BATCH_SIZE = 2**10
val_bpb = 1.0 + abs(LR_MULT - 2.0) * 0.1 + (os.getpid() % 7) * 1e-5
print("---")
print(f"val_bpb:          {val_bpb:.6f}")
print(f"peak_vram_mb:     {1000.0 * TOTAL_BATCH_SIZE / 1024:.1f}")
"""


def test_the_config_written_for_a_karpathy_layout_runs(tmp_path: Path) -> None:
    from assay import api

    root = make(tmp_path / "k", {"train.py": TRAIN, "prepare.py": "# data\n",
                                 "program.md": "# lower val_bpb\n"})
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.email=d@x", "-c", "user.name=d", "commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    path = api.init(root)  # no terminal: nothing is asked
    text = path.read_text().replace('bench = "python train.py"',
                                    f'bench = "{sys.executable} train.py"')
    path.write_text(text)
    target = parse(text, root)
    assert target.run.proposer == "sweep" and {p.name for p in target.params} == {
        "LR_MULT", "TOTAL_BATCH_SIZE"}
    summary = api.run(root, budget=2)
    assert summary.failed == "", summary
    assert summary.finished == 2
    # a value the file already holds keeps the file's spelling (2**10, not 1024)
    assert "TOTAL_BATCH_SIZE = 2**10" in (root / ".assay" / "worktrees" / "s0-a" / "train.py"
                                          ).read_text()
    # results.tsv as karpathy's notebook reads it: a baseline row first, then every
    # experiment with a value (a candidate measured alone is judged against the incumbent's
    # recent runs, so a discard shows its effect applied to that value, never 0)
    df = pd.read_csv(io.StringIO(api.export("tsv", root)), sep="\t")
    assert list(df.columns) == ["commit", "val_bpb", "memory_gb", "status", "description"]
    assert len(df) == 3 and df["description"][0] == "baseline", df
    assert abs(df["val_bpb"][0] - 1.1) < 1e-3 and df["memory_gb"][0] == round(1000 / 1024, 3), df
    assert (df["val_bpb"] > 0.9).all() and (df["memory_gb"] > 0).all(), df
