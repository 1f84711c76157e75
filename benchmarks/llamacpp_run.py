"""The llama.cpp study's last step: `assay research`, `assay run`, `assay finalize` on the
prepared llama.cpp tree, and the table that compares assay's decisions with the truth.

Used by ``benchmarks/llamacpp_study.py run`` (its default command); every function here
takes plain paths and values, so the study's preparation stays in one file and this one
only drives assay's command line and reads what it wrote.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Where each candidate's idea shows up in the research brief: a hypothesis matches a
# candidate when it names every word of one of the candidate's alternatives; a fusion
# hypothesis ("Fuse A → B ...") matches only the fusion candidate (05), since a one-pass
# kernel is not the graph fusion of the op with another.
RESEARCH_WORDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "01-soft-max-one-pass": (("soft_max",), ("softmax",)),
    "02-rms-norm-one-pass": (("rms_norm",), ("rms norm",)),
    "03-from-float-rows-or-elements": (("from_float",), ("quantize_row_q8",)),
    "04-flash-attn-tile-fma": (("flash_attn",), ("flash attn",)),
    "05-fuse-rope-set-rows": (("rope → set_rows",),),
    "06-q4-0-gemv-prefetch": (("gemv_q4",), ("gemv", "q4_0"), ("vec_dot_q4_0",)),
    "07-q4-0-gemv-two-accumulators": (("gemv_q4",), ("gemv", "q4_0"), ("vec_dot_q4_0",)),
    "08-q4-0-gemv-hoisted-blocks": (("gemv_q4",), ("gemv", "q4_0"), ("vec_dot_q4_0",)),
}


class RunError(Exception):
    """An assay command of the study failed: which, and its output's end."""


def log(msg: str) -> None:
    print(msg, flush=True)


def assay(tree: Path, *args: str, out: Path | None = None, timeout: float | None = None,
          ok_codes: tuple[int, ...] = (0,)) -> str:
    """``python -m assay ARGS -C TREE`` with this repository's package; its stdout (also
    appended to ``out`` as it goes, when given)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "assay", *args, "-C", str(tree)]
    if out is None:
        r = subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=timeout,
                           check=False)
        text, err, code = r.stdout, r.stderr, r.returncode
    else:  # appended to: a resumed run's output follows the interrupted one's
        start = out.stat().st_size if out.exists() else 0
        with out.open("a") as f:
            r = subprocess.run(cmd, env=env, text=True, stdout=f, stderr=subprocess.STDOUT,
                               timeout=timeout, check=False)
        with out.open() as f:
            f.seek(start)
            text, err, code = f.read(), "", r.returncode
    if code not in ok_codes:
        raise RunError(f"`assay {' '.join(args)}` exited {code}: {(err or text)[-2500:]}")
    return text


# --- the target tree --------------------------------------------------------------------

def recipe_text(recipe: str, threads: int, reps: int, model_name: str, jobs: int = 2) -> str:
    """The example recipe with the study's llama-bench threads and repetitions, parallel
    compilations and model size: the settings this study ran (the example's own are -t 2
    -r 3, -j 2, the 55M model)."""
    out = recipe.replace(" -r 3 -fa 1 -t 2 ", f" -r {reps} -fa 1 -t {threads} ")
    out = out.replace("cmake --build build -j 2 ", f"cmake --build build -j {jobs} ")
    out = out.replace(" -t 2 -fa on", f" -t {threads} -fa on")
    return re.sub(r'^model = "[^"]*"', f'model = "{model_name}"', out, flags=re.MULTILINE)


def make_target(src: Path, dest: Path, model_file: Path, ppl_text: str, recipe: str,
                patches: Sequence[Path], programs: Path | None = None) -> Path:
    """A fresh clone of the study's llama.cpp repository with one more commit: the recipe
    as ``assay.toml``, the model as ``models/bench.gguf``, the perplexity text as
    ``models/ppl.txt`` and the queued patches in ``assay-patches/`` (committed, so that
    assay's slot worktrees have them). ``programs``: the incumbent's static programs, copied
    to ``build/bin/`` (ignored by git): `assay research` profiles the benchmark in the
    checkout itself, which assay does not build."""
    if dest.exists():
        shutil.rmtree(dest)
    subprocess.run(["git", "clone", "-q", str(src), str(dest)], check=True)
    (dest / "models").mkdir(exist_ok=True)
    shutil.copy2(model_file, dest / "models" / "bench.gguf")
    (dest / "models" / "ppl.txt").write_text(ppl_text + "\n")
    (dest / "assay.toml").write_text(recipe)
    if programs is not None:
        (dest / "build" / "bin").mkdir(parents=True)
        for f in programs.iterdir():
            shutil.copy2(f, dest / "build" / "bin" / f.name)
    queue = dest / "assay-patches"
    queue.mkdir()
    for p in patches:
        shutil.copy2(p, queue / p.name)
    git = ["git", "-C", str(dest), "-c", "user.name=study", "-c", "user.email=study@localhost"]
    subprocess.run([*git, "add", "-f", "assay.toml", "models/bench.gguf", "models/ppl.txt",
                    "assay-patches"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "the study's recipe, model and queued patches"],
                   check=True)
    return dest


# --- research ---------------------------------------------------------------------------

def research(tree: Path, fork: Path | None, out: Path) -> dict[str, Any]:
    """``assay research`` (offline: the fork is read from the cache, not cloned); its JSON."""
    args = ["research", "--offline", "--json"]
    if fork is not None and (fork / "ggml" / "src").is_dir():
        # the fork keeps its CPU code in ggml/src itself (ggml.c, ggml-quants.c, iqk/)
        args += ["--source", f"{fork}#ggml/src"]
    text = assay(tree, *args, timeout=3600)
    out.write_text(text)
    start = text.find("{")
    if start < 0:
        raise RunError(f"assay research printed no JSON: {text[-1500:]}")
    data: dict[str, Any] = json.loads(text[start:])
    return data


def rank_in_brief(hypotheses: Sequence[Mapping[str, Any]], name: str) -> int | None:
    """The 1-based rank of the first hypothesis that names candidate ``name``'s idea."""
    fusion = name == "05-fuse-rope-set-rows"
    for i, h in enumerate(hypotheses, 1):
        words = str(h.get("text", "")).lower()
        if words.startswith("fuse ") != fusion:
            continue
        if any(all(w in words for w in alt) for alt in RESEARCH_WORDS.get(name, ())):
            return i
    return None


def research_summary(data: Mapping[str, Any]) -> list[str]:
    """The profile's hot spots, the roofline's verdicts, the gaps and diffs in numbers, and
    the brief's top ten."""
    lines = []
    prof = data.get("profile") or {}
    lines.append(f"profile: {prof.get('profiler', 'none')}, {prof.get('samples', 0)} samples"
                 + "".join(f"; {n}" for n in prof.get("notes", [])))
    for h in (prof.get("hotspots") or [])[:8]:
        share = h.get("share", h.get("fraction"))
        where = h.get("function") or h.get("name") or h.get("frame") or "?"
        lines.append(f"  hot: {where}"
                     + (f" {float(share):.1%}" if isinstance(share, int | float) else ""))
    place = data.get("placement") or {}
    lines.append(f"roofline (tg128, the metric): {place.get('bound', 'unknown')}: "
                 f"{place.get('explanation', '')}")
    for g in data.get("guard_placements") or []:
        lines.append(f"roofline ({g.get('metric')}, guard): {g.get('bound', 'unknown')}: "
                     f"{g.get('explanation', '')}")
    for g in data.get("gaps") or []:
        lines.append(f"gaps ({g['kind']}): {g['have']} has {len(g['only_have'])} the focus "
                     f"lacks, e.g. {', '.join(x['key'] for x in g['only_have'][:6])}")
    lines.append(f"fork diffs of hot functions: {len(data.get('diffs') or [])}")
    for d in (data.get("diffs") or [])[:5]:
        lines.append(f"  {d.get('function')}: {d.get('mine')} vs {d.get('other')} "
                     f"{d.get('theirs')} (+{d.get('added')}/-{d.get('removed')})")
    lines += [f"note: {n}" for n in data.get("notes") or []]
    lines.append("the brief's top ten:")
    for i, h in enumerate((data.get("hypotheses") or [])[:10], 1):
        text = " ".join(str(h.get("text", "")).split())
        lines.append(f"{i:>3}. [{h.get('source_kind', '?')}, {float(h.get('score', 0)):.2f}] "
                     f"{text[:170]}")
    return lines


# --- the run ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    """One candidate as assay decided it."""

    name: str
    exp: str
    state: str
    effect: float | None  # fraction, positive is faster
    lo: float | None
    hi: float | None
    runs: int
    first_build_s: float | None
    later_build_s: tuple[float, ...]
    checks_runs: int
    pp_change: float | None  # the pp512 guard: median B against median A, a fraction
    reason: str


def guard_change(runs: Sequence[Mapping[str, Any]], name: str) -> float | None:
    """The guard's relative change, median of the candidate's runs against the incumbent's."""
    a = [r["metrics"][name] for r in runs if r["role"] == "A" and name in r["metrics"]]
    b = [r["metrics"][name] for r in runs if r["role"] == "B" and name in r["metrics"]]
    if not a or not b:
        return None
    return float(statistics.median(b) / statistics.median(a) - 1.0)


def rows(tree: Path) -> list[Row]:
    """Every experiment of the run, from ``assay log`` and ``assay show``."""
    out = []
    for e in json.loads(assay(tree, "log", "--json", "--oldest")):
        show = json.loads(assay(tree, "show", e["id"], "--json"))
        blocks = [b for b in show["blocks"] if b.get("build_s") is not None]
        d = show.get("decision") or {}
        out.append(Row(
            name=Path(str((e.get("meta") or {}).get("file", e["id"]))).stem, exp=e["id"],
            state=e["state"], effect=d.get("effect"), lo=d.get("lo"), hi=d.get("hi"),
            runs=len(show["runs"]),
            first_build_s=blocks[0]["build_s"] if blocks else None,
            later_build_s=tuple(b["build_s"] for b in blocks[1:]),
            checks_runs=sum(int(b.get("checks_runs") or 0) for b in show["blocks"]),
            pp_change=guard_change(show["runs"], "pp512"),
            reason=" ".join(str(e.get("note") or d.get("reason") or "").split())))
    return out


def pr_texts(tree: Path) -> list[Path]:
    return sorted((tree / ".assay" / "finalize").glob("*/*/PR.md"))


# --- the final verification in the study's table form -----------------------------------

def verification_runs(tree: Path) -> dict[str, dict[str, list[float]]]:
    """The last verification journal's runs: role (A baseline, B final) → metric → values."""
    found = sorted((tree / ".assay" / "verify").glob("verify-*.sqlite"),
                   key=lambda p: p.stat().st_mtime)
    out: dict[str, dict[str, list[float]]] = {"A": {}, "B": {}}
    if not found:
        return out
    con = sqlite3.connect(f"file:{found[-1]}?mode=ro", uri=True)
    try:
        for role, status, metrics in con.execute("SELECT role, status, metrics FROM runs"):
            if status != "ok" or role not in out:
                continue
            for k, v in json.loads(metrics).items():
                out[role].setdefault(k, []).append(float(v))
    finally:
        con.close()
    return out


def mean_sd(v: Sequence[float]) -> str:
    if not v:
        return "-"
    sd = statistics.stdev(v) if len(v) > 1 else math.nan
    return f"{statistics.fmean(v):.1f} ± {sd:.1f}"


def study_table(runs: Mapping[str, Mapping[str, Sequence[float]]]) -> list[str]:
    """baseline ± sd, optimized ± sd and the change, for pp512 and tg128."""
    lines = [f"{'metric':<8}{'baseline t/s':>18}{'optimized t/s':>18}{'change':>9}{'runs':>7}"]
    for m in ("pp512", "tg128"):
        a, b = runs.get("A", {}).get(m, []), runs.get("B", {}).get(m, [])
        change = (f"{statistics.fmean(b) / statistics.fmean(a) - 1:+.2%}" if a and b else "-")
        lines.append(f"{m:<8}{mean_sd(a):>18}{mean_sd(b):>18}{change:>9}"
                     f"{len(a):>4}+{len(b):<3}")
    return lines


# --- the verdict ------------------------------------------------------------------------

def pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.2%}"


def candidate_table(found: Sequence[Row], truth: Callable[[str], tuple[str, float | None]]
                    ) -> list[str]:
    """Per candidate: the truth, assay's decision, effect and interval, runs, builds, checks."""
    lines = [f"{'candidate':<31}{'truth (tg; pp; 90% intervals)':<56}{'assay':<11}"
             f"{'effect':>8}{'interval':>20}{'pp512':>8}{'runs':>5}{'build 1st':>10}"
             f"{'later (max)':>12}{'checks':>7}"]
    for r in found:
        iv = "-" if r.lo is None or r.hi is None else f"[{pct(r.lo)}, {pct(r.hi)}]"
        later = f"{max(r.later_build_s):.1f} s" if r.later_build_s else "-"
        first = "-" if r.first_build_s is None else f"{r.first_build_s:.1f} s"
        lines.append(f"{r.name:<31}{truth(r.name)[0]:<56}{r.state:<11}{pct(r.effect):>8}"
                     f"{iv:>20}{pct(r.pp_change):>8}{r.runs:>5}{first:>10}"
                     f"{later + f' ({len(r.later_build_s)})' if r.later_build_s else '-':>12}"
                     f"{r.checks_runs:>7}")
    return lines


def verdict(found: Sequence[Row], truth_low: Mapping[str, float | None],
            truth_mean: Mapping[str, float | None], wrong: Sequence[str], delta: float,
            prs: Sequence[str]) -> tuple[bool, list[str]]:
    """The issue's conditions, each with whether it holds and why not. With nothing kept
    the conditions on keeps and on PR texts hold vacuously (the caller says so)."""
    kept = [r for r in found if r.state == "kept"]
    why: list[str] = []
    for r in kept:
        low = truth_low.get(r.name)
        if low is None or low <= delta:
            why.append(f"{r.name} was kept but its truth interval's low end "
                       f"{'(none)' if low is None else f'{low:+.2%}'} is not above δ {delta:.0%}")
    for r in kept:
        m = truth_mean.get(r.name)
        if m is not None and m <= 0:
            why.append(f"{r.name} was kept but its truth is {m:+.2%}")
    by_name = {r.name: r for r in found}
    for w in wrong:
        if w not in by_name or by_name[w].state != "invalid":
            why.append(f"the wrong change {w} is "
                       f"{by_name[w].state if w in by_name else 'not in the run'}, not invalid")
    for r in found:
        if r.first_build_s and r.later_build_s and max(r.later_build_s) > 0.1 * r.first_build_s:
            why.append(f"{r.name}: a later build took {max(r.later_build_s):.1f} s, more than "
                       f"10% of its first ({r.first_build_s:.1f} s)")
    if kept and not prs:
        why.append("changes were kept but finalize wrote no PR text")
    for text in prs:
        if "tg128" not in text or "pp512" not in text:
            why.append("a PR text lacks tg128 or pp512")
    return not why, why


def elapsed(t0: float) -> float:
    return time.monotonic() - t0
