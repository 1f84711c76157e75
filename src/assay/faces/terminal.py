"""What `assay run` prints: one compact line per decided experiment, then a summary.

Quiet by default: a line per decided experiment (id, verdict, improvement, interval,
runs, seconds, hypothesis) plus the few events a user must see (errors, warnings, the
noise calibration, quarantines, a signal). ``verbose`` adds every block decision and
re-measurement; ``as_json`` streams the same records as JSON lines for scripts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..journal.store import peek_count, peek_wall
from ..loop.progress import Summary
from ..measure.chain import words as chain_words
from ..measure.verify import compounded, unreproduced
from ..model import LEVEL, SCREEN, Direction, Experiment
from ..strictjson import dumps

STYLE = {"kept": "bold green", "discarded": "grey50", "invalid": "yellow", "crashed": "red",
         "conflict": "dark_orange", "running": "cyan", "queued": "cyan", "error": "bold red",
         "warn": "yellow", "rebase": "magenta", "promote": "green"}
# Events printed without -v: the ones a user must act on or would want to know once.
QUIET_EVENTS = frozenset({"error", "warn", "calibrated", "quarantine", "signal", "lock",
                          "stop", "resume", "verify", "tidy", "promote"})
SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143}
# The label of the baseline and best medians wherever they are shown beside the paired figure
UNPAIRED = "unpaired medians measured at different times"
DECIDED = frozenset({"keep", "kept", "discarded", "invalid", "crashed", "conflict", "reject"})


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 slot``, ``2 slots``."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.2%}"


def interval(lo: float | None, hi: float | None) -> str:
    if lo is None or hi is None:
        return "-"
    return f"[{pct(lo)}, {pct(hi)}]"


SI_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def number(v: Any, unit: str = "") -> str:
    """A measured value as the report writes it: 4 significant digits, with an SI prefix
    from a thousand up (``1.422M words/s``, ``939.4k``, ``0.9812``), never ``1.422e+06``."""
    if v is None:
        return "-"
    if isinstance(v, float):
        text = f"{v:.4g}"
        if math.isfinite(v):
            for scale, prefix in SI_PREFIXES:
                if abs(v) >= scale * 0.99995:
                    text = f"{float(f'{v / scale:.4g}'):.4g}{prefix}"
                    break
        return text + (f" {unit}" if unit else "")
    return str(v)


def improvement(baseline: float | None, best: float | None, direction: Direction) -> float | None:
    """Positive means better: best/baseline - 1 to maximize, baseline/best - 1 to minimize."""
    if not baseline or not best:
        return None
    return best / baseline - 1.0 if direction is Direction.MAXIMIZE else baseline / best - 1.0


TIME_UNITS = frozenset({"s", "sec", "secs", "second", "seconds", "ms", "us", "µs", "ns",
                        "min", "minutes", "h", "hours"})


def is_time(metric: str, unit: str) -> bool:
    """Whether a metric is a duration (its unit, else its name, says so)."""
    if unit:
        return unit.strip().lower() in TIME_UNITS
    name = metric.lower()
    return any(w in name for w in ("time", "latency", "seconds", "duration", "wall"))


def ratio_words(effect: float | None, direction: Direction, metric: str = "",
                unit: str = "") -> str:
    """For a metric to minimize, an improvement as a change and a ratio:
    ``-21.9% time, 1.28× faster`` (``lower``/``higher`` when it is not a time); '' else."""
    if effect is None or direction is not Direction.MINIMIZE or not effect > -1.0 \
            or not math.isfinite(effect):
        return ""
    ratio = 1.0 + effect  # baseline / best
    change = 1.0 / ratio - 1.0
    timed = is_time(metric, unit)
    what = "time" if timed else (metric or "value")
    if ratio >= 1.0:
        return f"{change:+.1%} {what}, {ratio:.2f}× {'faster' if timed else 'lower'}"
    return f"{change:+.1%} {what}, {1.0 / ratio:.2f}× {'slower' if timed else 'higher'}"


def paired_words(v: Mapping[str, Any], direction: Direction, metric: str = "",
                 unit: str = "") -> str:
    """The paired total improvement, its interval, the ratio, and the compounded keeps:
    ``+28.00% [+20.10%, +36.30%] (-21.9% time, 1.28× faster), 12 pairs; the 3 kept
    effects compound to +30.21%``."""
    effect, lo, hi = v.get("effect"), v.get("lo"), v.get("hi")
    text = f"{pct(effect)} {interval(lo, hi)}"
    ratio = ratio_words(effect, direction, metric, unit)
    if ratio:
        lo_r, hi_r = (1.0 + lo if lo is not None and lo > -1 else None,
                      1.0 + hi if hi is not None and hi > -1 else None)
        span = f" [{lo_r:.2f}×, {hi_r:.2f}×]" if lo_r is not None and hi_r is not None else ""
        text += f" ({ratio}{span})"
    text += f", {plural(int(v.get('pairs') or 0), 'pair')}"
    comp = v.get("compounded")
    if comp is not None:
        n = int(v.get("kept") or 0)
        text += (f"; the {plural(n, 'kept effect')} compound{'s' if n == 1 else ''} to "
                 f"{pct(comp)}")
    chain = v.get("chain")
    if chain:
        text += f"; {chain_words(chain)}"
    return text


def finished_in(journal_path: Path) -> int:
    """How many experiments the journal already holds finished (0 when there is none)."""
    return peek_count(journal_path, "finished") or 0


def experiment_record(exp: Experiment, runs: int | None,
                      seconds: float | None = None) -> dict[str, Any]:
    """The fields of one decided experiment's line (and JSON record); ``seconds``: what its
    blocks ran (:func:`assay.journal.store.peek_wall`), else the time from its proposal to
    its decision."""
    d = exp.decision
    if runs is None and d is not None:
        runs = int(d.details.get("runs_total", d.runs_used))
    return {"type": "experiment", "id": exp.id, "verdict": exp.state.value,
            "hypothesis": exp.candidate.hypothesis, "proposer": exp.candidate.proposer,
            "effect": d.effect if d else None, "lo": d.lo if d else None,
            "hi": d.hi if d else None, "runs": runs,
            "seconds": round(max(0.0, exp.updated_at - exp.created_at)
                             if seconds is None else seconds, 3),
            "commit": exp.commit, "reason": exp.note or (d.reason if d else ""),
            "unconfined": bool(exp.candidate.meta.get("unconfined"))}


def experiment_parts(rec: dict[str, Any]) -> tuple[str, str]:
    """An experiment's line as its fixed-width head and its hypothesis."""
    runs = "-" if rec["runs"] is None else str(rec["runs"])
    verdict = str(rec["verdict"])
    head = (f"{rec['id']} {verdict:<9} {pct(rec['effect']):>8} "
            f"{interval(rec['lo'], rec['hi']):<20} {runs:>3} runs {rec['seconds']:>7.1f} s  ")
    text = str(rec["hypothesis"]).replace("\n", " ")
    if rec.get("remeasured"):  # its first pairs were against an incumbent since replaced
        text = "(re-measured after a keep) " + text
    if rec.get("unconfined"):  # its commands ran without a sandbox
        text = "(unconfined) " + text
    if verdict in ("invalid", "crashed", "conflict") and rec["reason"]:
        text += f" ({cut_at_word(str(rec['reason']), REASON_CHARS, rec['id'])})"
    return head, text


REASON_CHARS = 120  # a reason in an experiment's line; `assay show` has it whole


def cut_at_word(text: str, limit: int, exp_id: str) -> str:
    """``text``'s first line, cut at a word within ``limit`` characters with "…" and a
    pointer to ``assay show`` when anything was left out."""
    lines = text.strip().splitlines() or [""]
    first = lines[0]
    if len(first) <= limit and len(lines) == 1:
        return first
    if len(first) > limit:
        cut = first[:limit + 1].rsplit(" ", 1)[0] if " " in first[:limit + 1] else first[:limit]
        first = cut.rstrip(" ,;:(") + "…"
    return f"{first}; see `assay show {exp_id}`"


def print_row(console: Console, head: str, text: str, style: str = "") -> None:
    """``head`` then ``text``, never cut: in a terminal too narrow for both, the line wraps
    at word boundaries, continued under the id; a pipe or a file gets one whole line."""
    line = head + text
    if console.is_terminal and len(line) > console.width > 20:
        import textwrap

        indent = " " * (len(head) - len(head.lstrip()) + 6)
        line = "\n".join(textwrap.wrap(line, console.width - 1, subsequent_indent=indent,
                                       break_on_hyphens=False))
    body = escape(line)
    console.print(f"[{style}]{body}[/]" if style else body, highlight=False,
                  soft_wrap=True)


class RunPrinter:
    """The `on_event` callback of `assay run` and the summary after it."""

    def __init__(self, console: Console, *, verbose: bool = False, as_json: bool = False,
                 total: int = 0, done_before: int = 0, journal_path: Path | None = None,
                 out: TextIO | None = None) -> None:
        self.console = console
        self.verbose = verbose
        self.as_json = as_json
        self.total = total
        self.done = done_before
        self.journal_path = journal_path
        self.out = out
        self.signalled = ""  # the signal's name, once one asked the run to stop
        self.printed_errors: list[str] = []
        self._decided: set[str] = set()
        self._remeasured: set[str] = set()  # measured again after the incumbent moved
        self._progress: Progress | None = None
        self._task: Any = None

    # -- the live part -----------------------------------------------------------------
    def _bar(self) -> None:
        """Start the progress bar on the first event (never before a config error)."""
        if self._progress is not None or self.as_json or not self.console.is_terminal:
            return
        self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(),
                                  console=self.console, transient=True)
        self._task = self._progress.add_task("experiments", total=max(self.total, self.done),
                                             completed=self.done)
        self._progress.start()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _emit_json(self, record: dict[str, Any]) -> None:
        line = dumps(record)
        if self.out is not None:
            self.out.write(line + "\n")
            self.out.flush()
        else:
            print(line, flush=True)

    def _print(self, text: str, style: str = "") -> None:
        """Events wrap at a terminal's width; in a pipe or a file nothing is wrapped."""
        target = self._progress.console if self._progress is not None else self.console
        body = escape(text)
        markup = f"[{style}]{body}[/]" if style else body
        target.print(markup, highlight=False, soft_wrap=not target.is_terminal)

    def _runs_of(self, exp_id: str) -> int | None:
        if self.journal_path is None:
            return None
        return peek_count(self.journal_path, "runs", exp_id)

    def _wall_of(self, exp_id: str) -> float | None:
        return None if self.journal_path is None else peek_wall(self.journal_path, exp_id)

    def on_event(self, kind: str, message: str, exp: Experiment | None) -> None:
        if kind == "signal":
            self.signalled = message.split(":", 1)[0]
        if kind == "rebase" and exp is not None:
            self._remeasured.add(exp.id)
        self._bar()
        if (exp is not None and kind in DECIDED and exp.state.is_finished()
                and exp.id not in self._decided):
            self._decided.add(exp.id)
            self.done += 1
            runs = None if exp.decision is not None else self._runs_of(exp.id)
            rec = experiment_record(exp, runs, self._wall_of(exp.id))
            rec["remeasured"] = exp.id in self._remeasured
            if self.as_json:
                self._emit_json(rec)
            else:
                target = self._progress.console if self._progress is not None else self.console
                print_row(target, *experiment_parts(rec), style=STYLE.get(exp.state.value, ""))
            if self._progress is not None:
                self._progress.update(self._task, completed=min(self.done, self.total)
                                      if self.total else self.done)
            return
        if not (self.verbose or kind in QUIET_EVENTS):
            return
        if kind == "error":
            self.printed_errors.append(message)
        if self.as_json:
            self._emit_json({"type": "event", "kind": kind, "message": message,
                             "experiment": exp.id if exp else None, "ts": time.time()})
            return
        style = "dim" if kind in ("measure", "queued") else STYLE.get(kind, "")
        prefix = {"error": "error: ", "warn": "warning: "}.get(kind, "")
        self._print(prefix + message, style)

    @property
    def exit_code(self) -> int:
        """128 + the signal's number after a signal stopped the run (130 for Ctrl-C), else 0."""
        return SIGNAL_EXIT.get(self.signalled, 130) if self.signalled else 0

    # -- the end -----------------------------------------------------------------------
    def summary(self, s: Summary, metric: str, unit: str, direction: Direction) -> None:
        self.close()
        gain = improvement(s.baseline, s.best, direction)
        doubt = unreproduced(s.verified, s.kept)
        if self.as_json:
            self._emit_json({
                "type": "summary", "stopped": s.stopped or "done", "finished": s.finished,
                "counts": dict(s.counts), "baseline": s.baseline, "best": s.best,
                "improvement": gain, "branch": s.branch, "failed": s.failed,
                "kept": [e.id for e in s.kept], "verified": s.verified,
                "verify_note": s.verify_note, "unreproduced": doubt, "spend": s.spend,
                "open": [{"id": e.id, "effect": e.decision.effect, "interval": [e.decision.lo,
                          e.decision.hi], "reason": e.decision.reason}
                         for e in s.open if e.decision is not None],
                "awaiting": s.awaiting})
            return
        c = self.console
        c.rule("[bold]summary")
        if doubt:
            c.print(f"[bold red]warning:[/] {escape(doubt)}", highlight=False)
        stopped = s.stopped or "done"
        if stopped in self.printed_errors:
            stopped = "on the error above"
        c.print(f"stopped: {escape(stopped)}", highlight=False)
        if s.finished:
            counts = ", ".join(f"{k} {v}" for k, v in sorted(s.counts.items())
                               if k in ("kept", "discarded", "invalid", "crashed", "conflict"))
            c.print(f"experiments: {s.finished} finished ({counts})", highlight=False)
        else:
            c.print("experiments: none finished", highlight=False)
        # the headline: baseline and final best measured against each other; the medians
        # (measured at different times, perhaps under another load) come after, so labelled
        if s.verified:
            c.print(f"[bold]improvement (paired, baseline vs final best):[/] "
                    f"{escape(paired_words(s.verified, direction, metric, unit))}",
                    highlight=False)
        elif s.verify_note:
            c.print(f"improvement not verified: {escape(s.verify_note)}", highlight=False)
        if s.baseline is not None:
            best = f" -> best {number(s.best, unit)}" if s.kept else " (nothing kept)"
            ratio = ratio_words(gain, direction, metric, unit)
            c.print(f"{metric}, {UNPAIRED}: baseline {number(s.baseline, unit)}{best}"
                    + (f" ({gain:+.1%}{', ' + ratio if ratio else ''})"
                       if gain is not None and s.kept else ""), highlight=False,
                    soft_wrap=not c.is_terminal)
        if s.kept:
            c.print(f"kept changes (branch {escape(s.branch)}):", highlight=False)
            for e in s.kept:
                d = e.decision
                print_row(c, f"  {e.id} {pct(d.effect if d else None):>8} "
                             f"{interval(d.lo if d else None, d.hi if d else None):<20} "
                             f"{(e.commit or '')[:10]}  ", e.candidate.hypothesis)
            comp = compounded([e.decision.effect if e.decision else None for e in s.kept])
            if comp is not None and not s.verified:
                c.print(f"the kept effects compound to {pct(comp)}"
                        + (f" ({r})" if (r := ratio_words(comp, direction, metric, unit))
                           else ""), highlight=False)
        elif s.finished and not s.open:
            c.print("no change beat the incumbent by more than the noise")
        print_open(c, [(e.id, e.decision.effect, e.decision.lo, e.decision.hi,
                        e.decision.reason, e.candidate.hypothesis)
                       for e in s.open if e.decision is not None])
        for line in s.awaiting:  # [fidelity]: what the next levels would cost
            c.print(f"next level: {escape(line)}", highlight=False)
        if s.spend is not None:
            print_spend(c, s.spend)
        c.print("next: [bold]assay status[/], [bold]assay log[/], [bold]assay show <id>[/]")


def print_spend(console: Console, sp: dict[str, Any]) -> None:
    """The model calls' spend (:mod:`assay.measure.spend`), its caps, and a stop rule
    that ended the run."""
    if not sp["calls"] and not sp["caps"]:
        return
    caps = sp["caps_words"]
    console.print(f"spend: {escape(sp['words'])}" + (f" (caps: {caps})" if caps else ""),
                  highlight=False)
    stop = sp.get("stop")
    if stop:
        console.print(f"stopped by a rule ({escape(str(stop.get('kind')))}); "
                      "`assay run --continue` goes on", highlight=False)


def print_fidelity(console: Console, fid: Mapping[str, Any] | None) -> None:
    """With ``[fidelity]``: how each level's verdicts held at the next
    (:mod:`assay.decision.agreement`), and a warning per kind of change a level misleads on."""
    if not fid:
        return
    for line in fid["lines"]:
        console.print(f"fidelity: {escape(line)}", highlight=False)
    for line in fid["warnings"]:
        console.print(f"[bold yellow]warning:[/] {escape(line)}", highlight=False)


def print_open(console: Console, rows: Sequence[tuple[str, float | None, float | None,
                                                    float | None, str, str]]) -> None:
    """Experiments measured and not decided (id, effect, interval, the latest look's reason,
    hypothesis): one row each, the look's first words (``provisional keep``) included."""
    if not rows:
        return
    console.print("measured, not decided yet (the next [bold]assay run[/] goes on with them):",
                  highlight=False)
    for exp_id, effect, lo, hi, reason, hypothesis in rows:
        look = reason.split(":", 1)[0]
        print_row(console, f"  {exp_id} {pct(effect):>8} {interval(lo, hi):<20} {look}  ",
                  hypothesis)


def print_hypotheses(console: Console, hypotheses: Sequence[Any]) -> None:
    """Research hypotheses as a list that wraps to any width and never cuts a citation.

    Each source is printed on its own line without wrapping (``soft_wrap``): the terminal
    folds a long URL, but the text stays whole for copying.
    """
    console.print(f"[bold]hypotheses ({len(hypotheses)})[/]")
    for h in hypotheses:
        hid = f"H{h.id}" if getattr(h, "id", None) else "H?"
        console.print(f"[bold]{hid}[/] {escape(h.source_kind)} {h.score:.2f}  "
                      f"{escape(h.text)}", highlight=False)
        for src in h.sources:
            console.print(f"    {escape(src)}", soft_wrap=True, highlight=False)


# -- assay log / assay show ------------------------------------------------------------
def log_line(row: dict[str, Any]) -> str:
    """One experiment of `assay log`: id, state, effect, interval, runs, setup, hypothesis."""
    d = row.get("decision") or {}
    runs = d.get("runs_used", row.get("runs", "-"))
    setup = row.get("setup_s")
    setup_txt = "-" if setup is None else f"{setup:.1f}"
    hyp = str(row["hypothesis"]).replace("\n", " ")
    proposer = str(row["proposer"])
    if not hyp.startswith(proposer):
        hyp = f"{proposer}: {hyp}"
    if (row.get("meta") or {}).get("unconfined"):
        hyp = f"(unconfined) {hyp}"
    return (f"{row['id']} {row['state']:<9} {pct(d.get('effect')):>8} "
            f"{interval(d.get('lo'), d.get('hi')):<20} {runs!s:>4} {setup_txt:>7} s  {hyp}")


def print_log(console: Console, rows: Sequence[dict[str, Any]], header: bool = True) -> None:
    """Rows as they come (no table layout: the first line shows at once on any journal)."""
    if header:
        console.print(f"{'id':<5} {'state':<9} {'effect':>8} {'interval':<20} runs "
                      f"{'setup':>9}  hypothesis  (setup: build and checks)", style="bold",
                      highlight=False, soft_wrap=True)
    for row in rows:
        body = escape(log_line(row))
        style = STYLE.get(str(row["state"]), "")
        console.print(f"[{style}]{body}[/]" if style else body, highlight=False,
                      soft_wrap=True)


def block_setup_s(block: dict[str, Any], runs: Sequence[dict[str, Any]]) -> float | None:
    """Seconds a block spent outside its timed runs (checkouts, build, checks)."""
    wall = block.get("wall_s")
    if wall is None:
        return None
    inside = sum(float(r.get("wall_s") or 0.0) for r in runs if r.get("block_id") == block["id"])
    return max(0.0, float(wall) - inside)


def level_words(levels: Sequence[str], details: Mapping[str, Any]) -> str:
    """`` at TIME_BUDGET=30`` (and ``, screen: promoted``) for a decision made at a fidelity
    level; '' without ``[fidelity]``."""
    level = details.get(LEVEL)
    if not levels or not isinstance(level, int) or not 0 <= level < len(levels):
        return ""
    screen = details.get(SCREEN)
    return f" at {levels[level]}" + (f", screen: {screen}" if screen else "")


def print_blocks(console: Console, blocks: Sequence[dict[str, Any]],
                 runs: Sequence[dict[str, Any]], levels: Sequence[str] = ()) -> None:
    """Each block's wall time and what it spent on build and checks (and, with
    ``[fidelity]``, the level it ran at)."""
    console.print("[bold]blocks[/]")
    for b in blocks:
        parts = [f"  {b['id']:<10} {b['kind']:<8} {b.get('slot') or '-':<4} "
                 f"{b['state']:<9}"]
        if levels and 0 <= int(b.get("level") or 0) < len(levels):
            parts.append(f"at {levels[int(b.get('level') or 0)]}")
        wall = b.get("wall_s")
        parts.append("wall -" if wall is None else f"wall {wall:.2f} s")
        if b.get("build_s") is not None:
            parts.append(f"build {b['build_s']:.2f} s")
        if b.get("checks_s") is not None:
            parts.append(f"checks {b['checks_s']:.2f} s")
        if b.get("build_s") is None and b.get("checks_s") is None:
            setup = block_setup_s(b, runs)
            if setup is not None:
                parts.append(f"build+checks {setup:.2f} s")
        if b.get("checks_passed") is not None:
            parts.append("checks passed" if b["checks_passed"] else "checks FAILED")
        if b.get("checks_outcome") in ("flaky", "reused"):  # checks run once per candidate
            parts.append(f"checks {b['checks_outcome']} ({b.get('checks_runs', 0)} run(s))")
        if b.get("error"):
            parts.append(f"{b.get('error_kind') or 'error'}: {b['error']}")
        console.print(escape(parts[0] + " " + ", ".join(parts[1:])), highlight=False,
                      soft_wrap=True)


def print_table(console: Console, table: Table) -> None:
    """``table`` fitted to a terminal; to a pipe, a file or a pager, at its whole width (a
    value is never cut with "…" where nobody can widen the window)."""
    if console.is_terminal:
        console.print(table)
        return
    width = max(console.width, console.measure(table, options=console.options.update_width(
        100_000)).maximum)
    Console(file=console.file, width=width, highlight=False, no_color=True).print(table)


def print_platforms(console: Console, rows: Sequence[dict[str, Any]]) -> None:
    """A decision's per-platform table: each platform's own effect and interval."""
    t = Table(title="per platform")
    for col in ("platform", "state", "improvement", "interval", "pairs"):
        t.add_column(col, no_wrap=True)
    t.add_column("reason")
    for r in rows:
        # The reason's first line, less the effect and interval the columns already show.
        reason = str(r.get("reason", "")).split("\n", 1)[0].split("; effect ", 1)[0]
        t.add_row(escape(str(r["platform"])), str(r["state"]), pct(r.get("effect")),
                  interval(r.get("lo"), r.get("hi")), str(r.get("pairs", 0)),
                  escape(reason))
    print_table(console, t)
