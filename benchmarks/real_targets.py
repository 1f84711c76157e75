"""assay on a real project no one here wrote, set up the way its users set it up.

Downloads at run time (``pip download --no-deps --no-binary :all:``, cached in
``~/.cache/assay-targets``, never in the repository) the sdist of **mistune**, a pure-Python
Markdown parser with its own test suite, and makes it a pi-autoresearch project in its
current ``.auto/`` layout: ``.auto/measure.sh`` prints ``METRIC parse_ms=...``,
``.auto/checks.sh`` runs the library's tests. The incumbent is a slowed library (a busy
loop in ``Markdown.parse``); three queued patches: a no-op (a comment), a slower one (a
longer loop) and a faster one (the patch that removes the loop). Then, with stdin closed:
``assay init`` (unattended), ``assay run``. Printed per target: the init outcome, every
decision, the build seconds of each block after a candidate's first, the checks runs per
candidate, the wall time; one summary line ending in PASS or FAIL.

    python benchmarks/real_targets.py [--scripted]

``--scripted`` replaces the wall-clock metric by one computed from the loop's length in
the source (with seeded noise): the same decisions on any machine, however loaded (the
suite's end-to-end test uses it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CACHE = Path(os.environ.get("ASSAY_TARGETS_CACHE", Path.home() / ".cache" / "assay-targets"))
PY = sys.executable
SLOW = "        for _slow in range({n}):  # assay-bench: slowed incumbent\n            pass\n"
# The library's own tests; its one wall-clock scaling test is left out (it fails on a busy
# machine whatever the code: assay's incumbent check stops the run when it does).
CHECKS = ("tests/test_misc.py", "tests/test_hooks.py", "tests/test_def_list.py",
          "tests/test_renderers.py")

MEASURE_REAL = """\
#!/bin/bash
set -e
{py} - <<'EOF'
import sys, time
sys.path.insert(0, "src")
import mistune
text = open("README.rst").read() * 4
md = mistune.create_markdown()
best = None
for _ in range(3):
    t = time.perf_counter()
    for _ in range(5):
        md(text)
    ms = (time.perf_counter() - t) * 1000 / 5
    best = ms if best is None else min(best, ms)
print(f"METRIC parse_ms={{best:.3f}}")
EOF
"""

MEASURE_SCRIPTED = """\
#!/bin/bash
set -e
{py} - <<'EOF'
import random, re, sys
sys.path.insert(0, "src")
import mistune  # the library must import
src = open(sys.modules["mistune.markdown"].__file__).read()
loops = sum(int(n) for n in re.findall(r"range\\((\\d+)\\):  # assay-bench", src))
rng = random.Random()
print(f"METRIC parse_ms={{(20.0 + loops / 1000.0) * rng.uniform(0.995, 1.005):.4f}}")
EOF
"""


def sh(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)


def sdist(name: str) -> Path:
    """The project's sdist, unpacked in the cache (downloaded once)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    archives = sorted(CACHE.glob(f"{name}-*.tar.gz"))
    if not archives:
        r = sh([PY, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", name, "-d",
                str(CACHE), "-q"], CACHE)
        archives = sorted(CACHE.glob(f"{name}-*.tar.gz"))
        if not archives:
            raise SystemExit(f"pip download {name} failed: {r.stderr.strip()[-400:]}")
    archive = archives[-1]
    folder = CACHE / archive.name.removesuffix(".tar.gz")
    if not folder.is_dir():
        with tarfile.open(archive) as tar:
            tar.extractall(CACHE, filter="data")
    return folder


@dataclass
class Outcome:
    target: str
    init: str = ""
    decisions: dict[str, str] = field(default_factory=dict)
    expected: dict[str, str] = field(default_factory=dict)
    first_build_s: dict[str, float] = field(default_factory=dict)
    later_build_s: dict[str, list[float]] = field(default_factory=dict)
    checks_runs: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _git(root: Path, *args: str) -> str:
    r = sh(["git", *args], root)
    if r.returncode:
        raise SystemExit(f"git {' '.join(args)}: {r.stderr}")
    return r.stdout


def _patch(root: Path, path: str, old: str, new: str) -> str:
    f = root / path
    text = f.read_text()
    assert old in text, (path, old)
    f.write_text(text.replace(old, new, 1))
    diff = _git(root, "diff")
    f.write_text(text)
    return diff


def mistune_target(work: Path, scripted: bool) -> tuple[Path, dict[str, tuple[str, str]]]:
    """A git repository of mistune in pi-autoresearch's layout, incumbent slowed."""
    src = sdist("mistune")
    root = work / "mistune"
    shutil.copytree(src, root)
    auto = root / ".auto"
    auto.mkdir()
    (auto / "measure.sh").write_text((MEASURE_SCRIPTED if scripted else MEASURE_REAL)
                                     .format(py=PY))
    (auto / "checks.sh").write_text(f"#!/bin/bash\nset -e\nPYTHONPATH=src {PY} -m pytest -q "
                                    "-p no:cacheprovider -k 'not quadratically' "
                                    f"{' '.join(c for c in CHECKS if (root / c).is_file())}\n")
    (auto / "prompt.md").write_text("# Make mistune parse Markdown faster\n")
    (root / ".gitignore").write_text("__pycache__/\n*.pyc\n")
    md = root / "src" / "mistune" / "markdown.py"
    text = md.read_text()
    anchor = "        # normalize line separator\n"
    if anchor not in text:
        raise SystemExit("mistune's Markdown.parse changed; update the anchor in this script")
    n = 3000 if scripted else 400_000
    md.write_text(text.replace(anchor, anchor + SLOW.format(n=n), 1))
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.email", "dev@example.org")
    _git(root, "config", "user.name", "dev")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "mistune, slowed")
    rel = "src/mistune/markdown.py"
    slow_line = SLOW.format(n=n)
    patches = {
        "1-noop.patch": ("a comment only (no-op)", _patch(
            root, rel, anchor, "        # normalize the line separators\n")),
        "2-slower.patch": ("twice the busy loop (slower)", _patch(
            root, rel, slow_line, SLOW.format(n=2 * n))),
        "3-faster.patch": ("remove the busy loop (faster)", _patch(root, rel, slow_line, "")),
    }
    return root, patches


C_SLOW = ("    {{ volatile unsigned long assay_slow = 0;  /* assay-bench: slowed incumbent */\n"
          "      for (unsigned long i = 0; i < {n}UL; i++) assay_slow += i; }}\n")
C_BENCH = """\
#!/bin/sh
# Time one compression of the corpus by minigzip, best of three, in milliseconds.
set -e
exe="$1"
best=""
for i in 1 2 3; do
    t0=$(date +%s%N)
    "$exe" -c bench/corpus.txt > /dev/null
    t1=$(date +%s%N)
    ms=$(( (t1 - t0) / 1000000 ))
    if [ -z "$best" ] || [ "$ms" -lt "$best" ]; then best=$ms; fi
done
echo "METRIC compress_ms=$best"
"""


def zlibng_target(work: Path) -> tuple[Path, dict[str, tuple[str, str]]]:
    """zlib-ng (C, CMake) from the zlib-ng sdist, its deflateInit2 slowed."""
    src = sdist("zlib_ng") / "src" / "zlib_ng" / "zlib-ng"
    if not (src / "CMakeLists.txt").is_file():
        raise SystemExit(f"{src}: no CMakeLists.txt in the zlib-ng sdist")
    root = work / "zlib-ng"
    shutil.copytree(src, root, ignore=shutil.ignore_patterns("build", ".git"))
    (root / "bench").mkdir()
    words = [f"w{(i * 7919) % 5003}" for i in range(400_000)]
    (root / "bench" / "corpus.txt").write_text(" ".join(words))
    (root / "bench" / "time.sh").write_text(C_BENCH)
    (root / ".gitignore").write_text("build/\n")
    deflate = root / "deflate.c"
    text = deflate.read_text()
    anchor = "    /* Initialize functable */\n"
    if anchor not in text:
        raise SystemExit("zlib-ng's deflateInit2 changed; update the anchor in this script")
    n = 300_000_000
    deflate.write_text(text.replace(anchor, C_SLOW.format(n=n) + anchor, 1))
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.email", "dev@example.org")
    _git(root, "config", "user.name", "dev")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "zlib-ng, slowed")
    slow = C_SLOW.format(n=n)
    patches = {
        "1-noop.patch": ("a comment only (no-op)", _patch(
            root, "deflate.c", anchor, "    /* Initialize the function table */\n")),
        "2-slower.patch": ("twice the busy loop (slower)", _patch(
            root, "deflate.c", slow, C_SLOW.format(n=2 * n))),
        "3-faster.patch": ("remove the busy loop (faster)", _patch(root, "deflate.c", slow, "")),
    }
    return root, patches


def run_target(name: str, root: Path, patches: dict[str, tuple[str, str]],
               expected: dict[str, str], init_flags: list[str]) -> Outcome:
    out = Outcome(name, expected=expected)
    t0 = time.monotonic()
    env = {**os.environ, "COLUMNS": "200"}
    r = subprocess.run([PY, "-m", "assay", "init", "-C", str(root), *init_flags],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env)
    layout = next((ln.split(":", 1)[1].strip() for ln in r.stdout.splitlines()
                   if ln.startswith("layout:")), "?")
    out.init = f"exit {r.returncode}, layout {layout}"
    if r.returncode != 0:
        out.problems.append(f"init failed: {(r.stdout + r.stderr)[-600:]}")
        return out
    folder = root / "patches"  # init made it for the queue proposer it wrote
    folder.mkdir(exist_ok=True)
    for fname, (hyp, diff) in patches.items():
        (folder / fname).write_text(f"# hypothesis: {hyp}\n{diff}")
    cfg = (root / "assay.toml").read_text()
    (root / "assay.toml").write_text(cfg.replace("budget = 20", f"budget = {len(patches)}"))
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "assay config and queued patches")
    r = subprocess.run([PY, "-m", "assay", "run", "-C", str(root), "--proposer", "queue"],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env)
    out.wall_s = time.monotonic() - t0
    if r.returncode != 0:
        out.problems.append(f"run exited {r.returncode}: {(r.stdout + r.stderr)[-800:]}")
    db = sqlite3.connect(root / ".assay" / "journal.sqlite")
    notes: dict[str, str] = {}
    for exp_id, hyp, state, note in db.execute("SELECT id, hypothesis, state, note FROM "
                                               "experiments ORDER BY seq"):
        out.decisions[hyp] = state
        notes[hyp] = note
        blocks = db.execute("SELECT build_s, checks_runs FROM blocks WHERE experiment_id = ? "
                            "AND state = 'done' ORDER BY seq", (exp_id,)).fetchall()
        if blocks:
            out.first_build_s[hyp] = float(blocks[0][0] or 0.0)
            out.later_build_s[hyp] = [float(b[0] or 0.0) for b in blocks[1:]]
        out.checks_runs[hyp] = sum(int(b[1] or 0) for b in blocks)
    for hyp, want in expected.items():
        got = out.decisions.get(hyp, "missing")
        if got != want:
            out.problems.append(f"{hyp}: {got}, expected {want} ({notes.get(hyp, '')[:300]})")
        if out.checks_runs.get(hyp, 0) != 1:
            out.problems.append(f"{hyp}: checks ran {out.checks_runs.get(hyp, 0)} times")
        first = out.first_build_s.get(hyp, 0.0)
        late = out.later_build_s.get(hyp, [])
        if late and first > 0 and max(late) > 0.1 * first:
            out.problems.append(f"{hyp}: a later block built for {max(late):.1f} s "
                                f"(first {first:.1f} s)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scripted", action="store_true", help="a metric computed from the "
                    "source (deterministic under load) instead of wall-clock time")
    ap.add_argument("--json", type=Path, help="also write the outcomes here")
    ap.add_argument("--python-only", action="store_true", help="only the pure-Python target")
    ap.add_argument("--c-only", action="store_true", help="only the C/C++ target")
    args = ap.parse_args(argv)
    results: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="assay-real-") as tmp:
        if not args.c_only:
            root, patches = mistune_target(Path(tmp), args.scripted)
            results.append(run_target(
                "mistune (pure Python, pi-autoresearch .auto/ layout)", root, patches,
                {"a comment only (no-op)": "discarded",
                 "twice the busy loop (slower)": "discarded",
                 "remove the busy loop (faster)": "kept"},
                ["--build", f"{PY} -m compileall -q src"]))
        if not args.python_only:
            root, patches = zlibng_target(Path(tmp))
            configure = ("cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DWITH_GTEST=OFF "
                         "-DBUILD_SHARED_LIBS=OFF -DWITH_BENCHMARKS=OFF")
            if shutil.which("ccache"):
                configure += " -DCMAKE_C_COMPILER_LAUNCHER=ccache"
            results.append(run_target(
                "zlib-ng (C, CMake build)", root, patches,
                {"a comment only (no-op)": "discarded",
                 "twice the busy loop (slower)": "discarded",
                 "remove the busy loop (faster)": "kept"},
                ["--metric", "compress_ms", "--bench", "sh bench/time.sh ./build/minigzip",
                 "--checks", "./build/example", "--editable", "*.c, *.h, arch/**",
                 # what init proposes (only the programs the bench and checks run), with
                 # the configure flags this sdist needs offline
                 "--build", f"{configure} >/dev/null && cmake --build build "
                            f"-j {max(1, (os.cpu_count() or 1))} --target minigzip example"]))
    for o in results:
        print(f"== {o.target}")
        print(f"   init: {o.init}")
        print(f"   {'candidate':34} {'decision':10} {'expected':10} {'build 1st s':>11} "
              f"{'later builds s':>15} {'checks runs':>11}")
        for hyp, want in o.expected.items():
            late = ", ".join(f"{x:.2f}" for x in o.later_build_s.get(hyp, [])) or "-"
            print(f"   {hyp:34} {o.decisions.get(hyp, '-'):10} {want:10} "
                  f"{o.first_build_s.get(hyp, 0.0):11.2f} {late:>15} "
                  f"{o.checks_runs.get(hyp, 0):11d}")
        print(f"   wall: {o.wall_s:.1f} s")
        for p in o.problems:
            print(f"   problem: {p}")
    if args.json:
        args.json.write_text(json.dumps([o.__dict__ | {"ok": o.ok} for o in results], indent=2))
    ok = all(o.ok for o in results)
    print(f"real targets: {sum(o.ok for o in results)}/{len(results)} as expected: "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
