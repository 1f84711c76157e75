"""Research quality on a real multi-backend C/C++ library: llama.cpp's ggml, as vendored
by the ``llama-cpp-python`` sdist (downloaded at run time, cached, never committed).

The target is ggml's CPU backend; its CUDA, Metal and Vulkan backends are the other
implementations. The benchmark under the profiler is ggml's own ``test-backend-ops perf``
on the CPU backend for one op (SOFT_MAX unless ``--op``), built here with CMake.

``research_quality_truth.toml`` beside this script is the hand-written list, from reading
that source, of what research should find: the fusions and kernels the other backends
ship that the CPU lacks, and the benchmark's hot spot. The script prints each of the top
ten hypotheses with the entry it matches, then precision of the top ten, recall of the
list, and the rank of the hot spot, and ends with one line: PASS when precision >= 90%,
recall >= 90% and the hot spot is in the top three.

    python benchmarks/research_quality.py [--cache DIR] [--op SOFT_MAX] [--fork DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from assay.config.spec import load  # noqa: E402
from assay.journal.store import Journal  # noqa: E402
from assay.research import ResearchHypothesis, run_research  # noqa: E402

PACKAGE = "llama-cpp-python"
GGML = "vendor/llama.cpp/ggml/src"
TRUTH = HERE / "research_quality_truth.toml"


def sdist(cache: Path) -> Path:
    """The extracted sdist (downloaded with pip once)."""
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                        "--no-binary", ":all:", PACKAGE, "-d", str(cache), "-q"],
                       check=True)
        found = sorted(cache.glob("llama_cpp_python-*.tar.gz"))
    archive = found[-1]
    root = cache / archive.name.removesuffix(".tar.gz")
    if not (root / GGML).is_dir():
        with tarfile.open(archive) as tar:
            tar.extractall(cache, filter="data")
    return root


def build(root: Path, cache: Path) -> Path | None:
    """ggml's test-backend-ops on the CPU backend (cached); None where it cannot be built.

    CMake builds ggml alone (no libllama); the test program is compiled against it.
    """
    out = cache / "build-cpu"
    exe = out / "bin" / "test-backend-ops"
    if exe.exists():
        return exe
    cxx = shutil.which("c++") or shutil.which("g++")
    if shutil.which("cmake") is None or cxx is None:
        return None
    src = root / "vendor" / "llama.cpp"
    jobs = str(len(os.sched_getaffinity(0)))
    subprocess.run(["cmake", "-S", str(src), "-B", str(out), "-DCMAKE_BUILD_TYPE=Release",
                    "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF",
                    "-DLLAMA_BUILD_TOOLS=OFF"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(out), "--target", "ggml", "-j", jobs],
                   check=True, capture_output=True)
    lib = out / "bin"
    subprocess.run([cxx, "-O2", "-std=c++17", f"-I{src / 'ggml' / 'include'}",
                    str(src / "tests" / "test-backend-ops.cpp"), "-o", str(exe), f"-L{lib}",
                    "-lggml", "-lggml-base", "-lggml-cpu", f"-Wl,-rpath,{lib}", "-lpthread"],
                   check=True, capture_output=True)
    return exe if exe.exists() else None


def write_target(root: Path, exe: Path | None, op: str, params: str, fork: Path | None,
                 top: int) -> None:
    """assay.toml and bench.sh in the extracted sdist: the CPU backend is the target."""
    cmd = f"\"{exe}\" perf -b CPU -o {op} -p '{params}'" if exe else "false"
    (root / "bench.sh").write_text(f"""#!/bin/sh
# the CPU backend's own per-op benchmark; the metric is the summed time per run
{cmd} | awk '/us\\/run/ {{ for (i = 1; i <= NF; i++) if ($i == "us/run") t += $(i-1) }}
  {{ print }} END {{ printf "METRIC us_per_run=%.3f\\n", t }}'
""", encoding="utf-8")
    backends = ", ".join(f'"{GGML}/ggml-{b}"' for b in ("cuda", "metal", "vulkan"))
    repos = f'"{fork}#ggml/src/ggml.c"' if fork else ""
    (root / "assay.toml").write_text(f"""[metric]
name = "us_per_run"
direction = "minimize"

[commands]
bench = "sh bench.sh"

[scope]
editable = ["{GGML}/ggml-cpu/**"]

[research]
focus = ["{GGML}/ggml-cpu"]
backends = [{backends}]
repos = [{repos}]
offline = true
profiler = "perf"
top = {top}
""", encoding="utf-8")


def matches(h: ResearchHypothesis, entry: dict[str, object]) -> bool:
    kind = str(entry["kind"])
    key = str(entry["key"])
    if kind == "profile":
        return h.source_kind == "profile" and key in h.ops
    return h.key.split("@", 1)[0] == f"{kind}:{key}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "assay-targets")
    ap.add_argument("--op", default="SOFT_MAX")
    ap.add_argument("--params", default=r"ne=\[65536,(1|4),1,1\]",
                    help="which cases of the op (test-backend-ops -p regex)")
    ap.add_argument("--fork", type=Path, default=None,
                    help="a checkout of a performance fork of llama.cpp (ik_llama.cpp): its "
                    "ggml/src/ggml.c is diffed against the hot functions")
    ap.add_argument("--top", type=int, default=40, help="hypotheses research keeps")
    ap.add_argument("--no-profile", action="store_true")
    args = ap.parse_args()
    truth = tomllib.loads(TRUTH.read_text(encoding="utf-8"))
    entries: list[dict[str, object]] = [e for e in truth["entry"]
                                        if args.fork or not e.get("fork")]
    t0 = time.monotonic()
    root = sdist(args.cache)
    exe = None if args.no_profile else build(root, args.cache)
    write_target(root, exe, args.op, args.params, args.fork, args.top)
    target = load(root)
    journal = Journal.open(target.state_dir / "journal.sqlite")
    try:
        result = run_research(target, journal, profile=exe is not None)
    finally:
        journal.close()
    hyps = result.hypotheses
    prof = result.profile
    print(f"target: {root.name} ({GGML}/ggml-cpu vs cuda, metal, vulkan); "
          f"benchmark: test-backend-ops perf -b CPU -o {args.op}; "
          f"research took {time.monotonic() - t0:.0f}s")
    if prof is not None:
        print(f"profiler: {prof.profiler}, {prof.samples} samples, exit {prof.exit_code}; "
              "hot: " + ", ".join(f"{h.function} {h.share:.0%}" for h in prof.hotspots[:4]))
    print(f"roof: {result.roof.basis if result.roof else 'none'}")
    print()
    print(f"{'rank':>4} {'id':>4} {'kind':8} {'score':>5} {'share':>5}  truth  hypothesis")
    hits = 0
    for n, h in enumerate(hyps[:10], 1):
        entry = next((e for e in entries if matches(h, e)), None)
        hits += entry is not None
        mark = "yes" if entry is not None else "NO"
        print(f"{n:4d} {h.id or 0:4d} {h.source_kind:8} {h.score:5.2f} {h.share:5.0%}  "
              f"{mark:5}  {h.text[:110]}")
    top = min(10, len(hyps))
    precision = hits / top if top else 0.0
    found = [e for e in entries if any(matches(h, e) for h in hyps)]
    recall = len(found) / len(entries) if entries else 0.0
    print()
    for e in entries:
        if e not in found:
            print(f"missed: {e['kind']} {e['key']} ({e['why']})")
    for d in result.diffs:
        if d.changed:
            print(f"\nfork diff of a hot function: {d.function}, {d.theirs} vs "
                  f"{d.mine} ({d.matched_by}; {'; '.join(d.summary)})")
            print("\n".join(d.diff.splitlines()[:24]))
    diff_hyps = [h for h in hyps if h.source_kind == "diff"]
    for h in diff_hyps[:1]:
        print(f"\nfork-diff hypothesis (rank {hyps.index(h) + 1}, H{h.id}): {h.text}")
    print()
    hot = next((e for e in entries if e["kind"] == "profile"), None)
    rank = next((n for n, h in enumerate(hyps, 1) if hot is not None and matches(h, hot)),
                None)
    print(f"precision of the top ten: {hits}/{top} = {precision:.0%}")
    print(f"recall of the hand-written list: {len(found)}/{len(entries)} = {recall:.0%}")
    print(f"rank of the benchmark's hot spot ({hot['key'] if hot else '?'}): "
          f"{rank if rank is not None else 'not ranked'}")
    ok = precision >= 0.9 and recall >= 0.9 and rank is not None and rank <= 3
    print(f"research quality: precision {precision:.0%} (>= 90%), recall {recall:.0%} "
          f"(>= 90%), hot spot rank {rank} (<= 3): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
