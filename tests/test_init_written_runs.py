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

from assay.config import parse
from assay.init import detect

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
