"""What `assay init` writes runs as written: no build for a project that has nothing to
build, globs that match files, a proposer that needs no table it lacks; in a terminal
(a real tmux) every guess is put to the user, the guess as the default answer.

The fixtures are small local projects shaped like a pure-Python PyPI library set up in
pi-autoresearch's `.auto/` layout (a Makefile whose default target is `help`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assay.config.spec import parse
from assay.init.write import detect

from .conftest import git, make_repo

# A pure-Python library whose Makefile's default target prints help, with a pi-autoresearch
# benchmark in .auto/ (its metric read from "METRIC parse_ms=").
PY_AUTO = {
    "Makefile": "PYTHON=`which python`\n\ndefault: help\n\nhelp:\n\t@echo commands\n\n"
                "test:\n\tpytest tests/\n",
    "pyproject.toml": '[project]\nname = "minisql"\n\n[tool.pytest.ini_options]\n',
    "minisql/__init__.py": "def split(text):\n    return [s for s in text.split(';') if s]\n",
    "tests/test_split.py": "from minisql import split\n\n\ndef test_split():\n"
                           "    assert split('a;b') == ['a', 'b']\n",
    ".auto/measure.sh": "#!/bin/bash\nset -e\npython .auto/bench.py\n",
    ".auto/bench.py": "import time\nfrom minisql import split\nt = time.perf_counter()\n"
                      "for _ in range(2000):\n    split('select 1; select 2;' * 20)\n"
                      "print(f'METRIC parse_ms={(time.perf_counter() - t) * 1e3:.3f}')\n",
    ".auto/checks.sh": "#!/bin/bash\npython -m pytest -q tests\n",
    ".auto/prompt.md": "# Make splitting fast\n",
}


def _init(root: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "assay", "init", "-C", str(root), *flags],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})


def test_a_python_project_whose_makefile_builds_nothing_gets_no_build(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "minisql", PY_AUTO)
    plan = detect(root)
    assert plan.build == "", plan.build
    assert not any("ccache" in line for line in (*plan.found, *plan.notes)), plan
    assert any("default target is 'help'" in f for f in plan.found), plan.found
    r = _init(root)
    assert r.returncode == 0, r.stdout + r.stderr
    target = parse((root / "assay.toml").read_text(), root)
    assert target.build is None
    # the same Makefile building a default `all` target: still nothing to compile
    (root / "Makefile").write_text("all:\n\t@echo nothing\n")
    assert detect(root).build == ""


class Tmux:
    """`assay init` in a real terminal: a tmux server of its own, its pane read back."""

    def __init__(self, root: Path, tag: str) -> None:
        self.socket = f"assay-init-{os.getpid()}-{tag}"
        cmd = (f"cd {shlex.quote(str(root))} && {shlex.quote(sys.executable)} -m assay init; "
               "echo EXIT=$?; sleep 600")
        subprocess.run(["tmux", "-L", self.socket, "new-session", "-d", "-x", "220", "-y",
                        "60", cmd], check=True, env={**os.environ, "COLUMNS": "220"})

    def pane(self) -> list[str]:
        out = subprocess.run(["tmux", "-L", self.socket, "capture-pane", "-p", "-J", "-S", "-"],
                             capture_output=True, text=True, check=True).stdout
        return [ln.rstrip() for ln in out.splitlines()]

    def answer(self, answers: list[str], deadline_s: float = 240) -> list[str]:
        """Type each answer at the next question ('' takes the default) until init exits;
        the transcript."""
        todo = list(answers)
        answered = -1
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            lines = self.pane()
            if any(ln.startswith("EXIT=") for ln in lines):
                return lines
            filled = [i for i, ln in enumerate(lines) if ln]
            last = filled[-1] if filled else -1
            if last > answered and lines[last].endswith(":"):
                reply = todo.pop(0) if todo else ""
                keys = [reply, "Enter"] if reply else ["Enter"]
                subprocess.run(["tmux", "-L", self.socket, "send-keys", "-t", "0", *keys],
                               check=True)
                answered = last
            time.sleep(0.2)
        raise AssertionError("init did not finish:\n" + "\n".join(self.pane()))

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


@pytest.fixture
def tmux(request: pytest.FixtureRequest) -> object:
    if shutil.which("tmux") is None:
        pytest.fail("tmux is needed: `make test` installs it (apt-get install tmux)")
    made: list[Tmux] = []

    def start(root: Path) -> Tmux:
        t = Tmux(root, str(len(made)))
        made.append(t)
        return t

    yield start
    for t in made:
        t.close()


def test_in_a_terminal_init_confirms_each_guess_with_it_as_the_default(
        tmp_path: Path, tmux: object) -> None:
    root = make_repo(tmp_path / "minisql", PY_AUTO)
    # Enter everywhere but the direction, which the user turns around
    lines = tmux(root).answer(["", "maximize"])  # type: ignore[operator]
    text = "\n".join(lines)
    assert "EXIT=0" in text, text
    for question in ("Metric name (as the benchmark prints it) [parse_ms]:",
                     "Direction: maximize or minimize [minimize]: maximize",
                     "Editable files (globs, comma-separated) [minisql/**/*.py]:",
                     "Who proposes candidates: queue (patch files you put in patches/)"):
        assert question in text, text
    target = parse((root / "assay.toml").read_text(), root)
    assert target.metric.name == "parse_ms" and target.metric.direction.value == "maximize"
    assert target.editable == ("minisql/**/*.py",) and target.run.proposer == "queue"


def test_a_config_init_writes_in_a_terminal_runs(tmp_path: Path, tmux: object) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q", "-b", "main")
    lines = tmux(empty).answer(["speed", "", "", "python bench.py"])  # type: ignore[operator]
    text = "\n".join(lines)
    assert "EXIT=2" in text and "matches no file" in text, text  # asked again, then refused
    assert text.count("src/**/*.py matches no file here") == 2, text
    assert not (empty / "assay.toml").exists()

    root = make_repo(tmp_path / "one", {
        "bench.py": "import work\nprint(f'METRIC speed={1e6 / work.WORK:.3f}')\n",
        "work.py": "WORK = 1000\n"})
    lines = tmux(root).answer(["speed", "", "", "python bench.py", "src/*.py", "work.py", "",
                               "llm", ""])  # type: ignore[operator]
    text = "\n".join(lines)
    assert "EXIT=0" in text, text
    assert "src/*.py matches no file here" in text  # the glob is asked again
    target = parse((root / "assay.toml").read_text(), root)
    assert target.editable == ("work.py",) and target.run.proposer == "queue"
    assert target.is_protected("bench.py")  # the benchmark the answers named
    assert target.sections["proposer"] == {"queue": {"path": "patches"}}
    git(root, "add", "assay.toml")
    git(root, "commit", "-qm", "assay")
    run = subprocess.run([sys.executable, "-m", "assay", "run", "-C", str(root), "--budget",
                          "1"], capture_output=True, text=True, timeout=300,
                         stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout + run.stderr


CMAKE_PROJECT = {
    "CMakeLists.txt": "cmake_minimum_required(VERSION 3.16)\nproject(mini C)\nenable_testing()\n"
                      "add_library(core src/core.c)\n"
                      "add_executable(bench bench/bench.c)\n"
                      "target_link_libraries(bench PRIVATE core)\n"
                      "add_executable(check-ref tests/check_ref.c)\n"
                      "target_link_libraries(check-ref PRIVATE core)\n"
                      "configure_file(tests/softmax-oracle.sh softmax-oracle COPYONLY)\n",
    "src/core.c": "int work(int n) { int s = 0; for (int i = 0; i < n; i++) s += i; return s; }\n",
    "bench/bench.c": "#include <stdio.h>\nint work(int);\n"
                     "int main(void) { printf(\"METRIC ns=%d\\n\", work(10) > 0 ? 5 : 6); }\n",
    "tests/check_ref.c": "int work(int);\nint main(void) { return work(4) == 6 ? 0 : 1; }\n",
    "tests/softmax-oracle.sh": "#!/bin/sh\nexit 0\n",
}


def test_cmake_build_targets_come_from_cmake_and_the_flags_replace_the_guesses(
        tmp_path: Path) -> None:
    if shutil.which("cmake") is None:
        pytest.fail("cmake is needed: `make test` installs it (apt-get install cmake)")
    root = make_repo(tmp_path / "mini", CMAKE_PROJECT)
    checks = "./build/check-ref && sh ./build/softmax-oracle"
    r = _init(root, "--metric", "ns", "--bench", "./build/bench", "--checks", checks,
              "--editable", "src/*")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    target = parse((root / "assay.toml").read_text(), root)
    assert target.build is not None
    assert target.build.cmd.endswith("--target bench check-ref"), target.build.cmd
    assert "softmax-oracle: run by the commands but no CMake target" in " ".join(out.split())
    # what the flags gave is not followed by init's own guesses for it
    assert "editable scoped" not in out and "checks run ctest" not in out, out
    assert target.editable == ("src/*",) and target.checks is not None
    assert target.is_protected("tests/check_ref.c")  # the checks' own program
    built = subprocess.run(["bash", "-c", target.build.cmd], cwd=root, capture_output=True,
                           text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    assert (root / "build" / "bench").is_file() and (root / "build" / "check-ref").is_file()
