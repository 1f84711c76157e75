"""The benchmark and the metric ``assay init`` recognises: a pi-autoresearch project
(``METRIC name=`` lines) or a karpathy autoresearch training script (a ``---`` summary),
and a direction guessed from a metric's name."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from ..repo.workspace import literal_value
from .files import read_text, referenced_files
from .plan import Findings, InitPlan, Knob

__all__ = ["detect_bench", "guess_direction"]

_METRIC_IN_SCRIPT = re.compile(r"METRIC\s+([A-Za-z_][\w.\-/]*)\s*=")
_SUMMARY_PRINT = re.compile(r"""print\(\s*f?["']\s*([A-Za-z_]\w*)\s*:""")
_MINIMIZE_WORDS = {
    "ms", "us", "ns", "s", "sec", "secs", "seconds", "second", "time", "times", "latency",
    "duration", "elapsed", "wall", "loss", "bpb", "bpc", "perplexity", "ppl", "error",
    "err", "errors", "mem", "memory", "bytes", "kb", "kib", "mb", "mib", "gb", "gib",
    "rss", "peak", "size", "cost", "cycles", "instructions", "misses", "p50", "p90",
    "p95", "p99", "mae", "mse", "rmse", "wer", "cer", "regret",
}
_KNOB = re.compile(r"^([A-Z][A-Z0-9_]*)[ \t]*=[ \t]*([0-9.eE+\-*/ ]+?)[ \t]*(?:#.*)?$",
                   re.MULTILINE)
_KNOB_WORDS = ("LR", "BATCH", "DEPTH", "WARMUP", "WARMDOWN", "DECAY", "RATIO", "FRAC",
               "ASPECT", "HEAD_DIM", "DIM", "MULT", "BETA", "MOMENTUM")
_SUMMARY_GUARDS = ("peak_vram_mb", "training_seconds", "total_seconds")


def guess_direction(name: str) -> tuple[str, str]:
    """A direction for a metric name, and the reason in words."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    if "per" in words:  # a rate: judge the numerator (tokens_per_s, ms_per_token)
        words = words[: words.index("per")]
    for word in reversed(words):
        if word in _MINIMIZE_WORDS:
            return "minimize", f"'{word}' in the name reads as a cost"
    return "maximize", "nothing in the name reads as a cost (time, memory, loss, error)"


def detect_bench(root: Path, plan: InitPlan, seen: Findings) -> InitPlan:
    """The plan with the benchmark and metric of a pi-autoresearch project or a karpathy
    autoresearch training script, when ``root`` holds one (the first wins)."""
    pi = _pi_files(root)
    if pi is not None:
        return _pi_autoresearch(root, plan, pi, seen)
    train = root / "train.py"
    if train.is_file() and ("---" in read_text(train) or (root / "prepare.py").is_file()):
        return _training_script(root, plan, seen)
    return plan


def _pi_files(root: Path) -> tuple[str, str, str] | None:
    """(measure, checks, prompt) of a pi-autoresearch project, current layout first."""
    auto = root / ".auto"
    if (auto / "measure.sh").is_file():
        return ".auto/measure.sh", ".auto/checks.sh", ".auto/prompt.md"
    if (root / "autoresearch.sh").is_file():
        return "autoresearch.sh", "autoresearch.checks.sh", "autoresearch.md"
    return None


def _metric_names(texts: Iterable[str]) -> list[str]:
    names: list[str] = []
    for text in texts:
        for name in _METRIC_IN_SCRIPT.findall(text):
            if name not in names:
                names.append(name)
    return names


def _pi_autoresearch(root: Path, plan: InitPlan, files: tuple[str, str, str],
                     seen: Findings) -> InitPlan:
    measure, checks_name, prompt_name = files
    found, protected = seen.found, seen.protected
    script = read_text(root / measure)
    helpers = [h for h in referenced_files(root, script) if h != measure]
    scripts = [script] + [read_text(root / h) for h in helpers]
    checks = ""
    protected.append(".auto/**" if measure.startswith(".auto/") else measure)
    if (root / checks_name).is_file():
        checks = f"bash {checks_name}"
        if not measure.startswith(".auto/"):
            protected.append(checks_name)
        found.append(f"{checks_name}: the correctness checks")
    protected += [h for h in helpers if h not in protected]
    names = _metric_names(scripts)
    layout_name = "current .auto/ layout" if measure.startswith(".auto/") else \
        "legacy flat layout"
    found.insert(0, f"{measure}: a pi-autoresearch benchmark ({layout_name})"
                 + (f" (also reads {', '.join(helpers)})" if helpers else ""))
    if (root / ".auto" / "log.jsonl").is_file():
        found.append(".auto/log.jsonl: pi-autoresearch's own log (left as it is; "
                     "`assay export jsonl` writes the same format)")
    metric, direction, others = _script_metrics(names, seen)
    brief = prompt_name if (root / prompt_name).is_file() else ""
    if brief and brief not in protected and not brief.startswith(".auto/"):
        protected.append(brief)
    seen.notes.append("proposer queue: put patch files in patches/ (or set proposer = "
                      "\"agent\" with a [proposer.agent] command)")
    return replace(plan, layout="pi-autoresearch", metric=metric, direction=direction,
                   reader="metric_lines", bench=f"bash {measure}", checks=checks,
                   brief=brief, other_metrics=tuple(others), proposer="queue")


def _script_metrics(names: list[str],
                     seen: Findings) -> tuple[str, str, list[tuple[str, str]]]:
    """The primary metric (the first METRIC name), its direction, and the others with
    theirs."""
    if not names:
        seen.notes.append("no 'METRIC name=' found in autoresearch.sh or the files it "
                          "names; give the metric name")
        return "", "maximize", []
    metric = names[0]
    direction, why = guess_direction(metric)
    seen.found.append(f"METRIC lines in the scripts: {', '.join(names)}")
    seen.notes.append(f"primary metric {metric!r} is the first METRIC name found; "
                      f"direction {direction} guessed ({why})")
    return metric, direction, [(n, guess_direction(n)[0]) for n in names[1:]]


def _training_script(root: Path, plan: InitPlan, seen: Findings) -> InitPlan:
    found, notes = seen.found, seen.notes
    text = read_text(root / "train.py")
    tail = text[text.find("---"):] if "---" in text else ""
    keys = list(dict.fromkeys(_SUMMARY_PRINT.findall(tail)))
    found.append("train.py: a karpathy autoresearch training script ('---' summary)")
    if "val_bpb" in text or not keys:
        metric = "val_bpb"
    else:
        metric = keys[0]
        notes.append(f"val_bpb is not printed by train.py; using {metric!r}, the "
                     "first key of its summary")
    direction, why = guess_direction(metric)
    if metric != "val_bpb":
        notes.append(f"direction {direction} guessed ({why})")
    others = [(k, guess_direction(k)[0]) for k in keys
              if k != metric and k in _SUMMARY_GUARDS]
    for name in ("prepare.py", "program.md"):
        if (root / name).is_file():
            seen.protected.append(name)
            found.append(f"{name}: " + ("data preparation and evaluation (protected)"
                                        if name == "prepare.py" else "the brief"))
    uv = (root / "uv.lock").is_file()
    knobs = _knobs(text)
    guards = (("peak_vram_mb", "minimize"),) if "peak_vram_mb" in text else ()
    if knobs:
        found.append("train.py hyperparameters to sweep: " + ", ".join(k.name for k in knobs))
    notes.append("proposer sweep over train.py's hyperparameters (no model is configured; "
                 "set proposer = \"llm\" with a [proposer.llm] table to use one)")
    return replace(plan, layout="autoresearch", metric=metric, direction=direction,
                   reader="summary_block", bench="uv run train.py" if uv
                   else "python train.py", bench_timeout=600.0,
                   editable=("train.py",),
                   brief="program.md" if (root / "program.md").is_file() else "",
                   other_metrics=tuple(o for o in others if o not in guards),
                   guards=guards, params=knobs, proposer="sweep" if knobs else "queue",
                   rule="expensive", budget=12, delta=0.003)


def _knobs(text: str, limit: int = 6) -> tuple[Knob, ...]:
    """Top-level numeric hyperparameters of a training script, with a small grid each."""
    out: list[Knob] = []
    found = [m for m in _KNOB.finditer(text) if any(w in m.group(1) for w in _KNOB_WORDS)]
    # learning rates and schedules first: they are what such a script's notes tune
    found.sort(key=lambda m: next(i for i, w in enumerate(_KNOB_WORDS) if w in m.group(1)))
    for m in found:
        name, expr = m.group(1), m.group(2)
        if any(k.name == name for k in out):
            continue
        try:
            value = literal_value(expr)
        except (ValueError, ArithmeticError, TypeError):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            continue
        out.append(_knob(name, value))
        if len(out) >= limit:
            break
    return tuple(out)


def _knob(name: str, value: int | float) -> Knob:
    """A knob with a small grid around ``value``: half, itself, double (a fraction or a
    ratio at most 1 goes up by half, to 1 at most)."""
    if isinstance(value, int):
        choices: tuple[int | float, ...] = tuple(sorted({max(1, value // 2), value,
                                                         value * 2}))
        return Knob(name, "int", value, choices)
    high = min(1.0, value * 1.5) if ("FRAC" in name or "RATIO" in name) and \
        value <= 1 else value * 2
    grid = sorted({float(f"{value * 0.5:.4g}"), value, float(f"{high:.4g}")})
    return Knob(name, "float", value, tuple(grid))
