"""The `assay` command line: thin verbs over :mod:`assay.api`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import api
from .errors import AssayError
from .loop import Summary
from .model import Experiment

app = typer.Typer(help="assay: measure every change, keep only what is real.",
                  no_args_is_help=True, add_completion=False)
console = Console()
err = Console(stderr=True, soft_wrap=True)  # an error (and the path in it) is never wrapped

ROOT = typer.Option(Path("."), "--root", "-C", help="The repository (holding assay.toml).")
CONFIG = typer.Option(None, "--config", help="Another config file than <root>/assay.toml.")
JSON = typer.Option(False, "--json", help="Print JSON instead of tables.")

_STYLE = {"kept": "bold green", "discarded": "grey50", "invalid": "yellow", "crashed": "red",
          "running": "cyan", "queued": "cyan"}


def _fail(exc: AssayError) -> None:
    err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
    raise typer.Exit(2)


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}{(' ' + unit) if unit else ''}"
    return str(v)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.2%}"


@app.command()
def init(root: Path = ROOT, force: bool = typer.Option(False, "--force",
                                                        help="Overwrite an existing assay.toml.")
         ) -> None:
    """Detect the project's layout and write an assay.toml (asks when it cannot tell)."""
    try:
        path = api.init(root, force=force, ask=lambda q, d: typer.prompt(q, default=d))
    except AssayError as exc:
        _fail(exc)
    console.print(f"wrote [bold]{path}[/]; review it, then run [bold]assay run[/]")


@app.command()
def run(root: Path = ROOT, config: str | None = CONFIG,
        budget: int | None = typer.Option(None, help="Experiments to run (default: [run] budget)."),
        proposer: str | None = typer.Option(None, help="sweep, queue, llm or agent."),
        slots: int | None = typer.Option(None, help="Parallel slots (default: [run] slots)."),
        name: str | None = typer.Option(None, help="Run name: kept commits go to assay/<name>."),
        max_hours: float | None = typer.Option(None, help="Stop proposing after this long."),
        ) -> None:
    """Run the loop: propose, measure against the incumbent, keep what is real."""
    try:
        target = api.load(root, config, slots=slots, proposer=proposer, budget=budget)
    except AssayError as exc:
        _fail(exc)
    total = target.run.budget
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                        transient=False)
    task = progress.add_task("experiments", total=total)
    finished: set[str] = set()

    def on_event(kind: str, message: str, exp: Experiment | None) -> None:
        style = _STYLE.get(kind, "")
        if kind in ("measure",):
            style = "dim"
        text = escape(message)
        progress.console.print(f"[{style}]{text}[/]" if style else text, highlight=False)
        if exp is not None and exp.state.is_finished() and exp.id not in finished:
            finished.add(exp.id)
            progress.update(task, completed=min(total, len(finished)))

    try:
        with progress:
            summary = api.run(root, budget=budget, proposer=proposer, slots=slots, name=name,
                              max_hours=max_hours, on_event=on_event, signals=True, config=config)
    except AssayError as exc:
        _fail(exc)
    print_summary(summary, target.metric.name, target.metric.unit)
    if summary.failed:
        raise typer.Exit(1)


def print_summary(s: Summary, metric: str, unit: str) -> None:
    console.rule("[bold]summary")
    console.print(f"stopped: {escape(s.stopped or 'done')}")
    console.print(f"experiments: {s.finished} finished "
                  f"({', '.join(f'{k} {v}' for k, v in sorted(s.counts.items()))})")
    console.print(f"{metric}: baseline {_fmt(s.baseline, unit)} -> best {_fmt(s.best, unit)}"
                  + (f" ({(s.best / s.baseline - 1):+.1%})" if s.baseline and s.best else ""))
    if s.kept:
        t = Table(title=f"kept changes (branch {s.branch})")
        for col in ("id", "change", "effect", "interval", "runs", "commit"):
            t.add_column(col)
        for e in s.kept:
            d = e.decision
            t.add_row(e.id, escape(e.candidate.hypothesis[:60]), _pct(d.effect if d else None),
                      f"[{_pct(d.lo if d else None)}, {_pct(d.hi if d else None)}]",
                      str(d.runs_used if d else "-"), (e.commit or "")[:10])
        console.print(t)
    else:
        console.print("no change beat the incumbent by more than the noise")
    console.print("next: [bold]assay status[/], [bold]assay log[/], [bold]assay show <id>[/]")


@app.command()
def status(root: Path = ROOT, config: str | None = CONFIG, as_json: bool = JSON) -> None:
    """The incumbent, the best so far, and counts by state."""
    try:
        st = api.status(root, config)
    except AssayError as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps(st, indent=2, default=str))
        return
    inc = st["incumbent"] or {}
    console.print(f"metric [bold]{st['metric']}[/] ({st['direction']}), "
                  f"{st['experiments']} experiments: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(st["counts"].items())))
    console.print(f"baseline {_fmt(st['baseline'], st['unit'])}, best "
                  f"{_fmt(st['best'], st['unit'])}; incumbent {str(inc.get('commit', ''))[:12]} "
                  f"on {st['branch']}")
    cal = st.get("calibration")
    if cal:
        console.print(f"noise: {escape(str(cal.get('message', '')))}")


@app.command()
def log(root: Path = ROOT, config: str | None = CONFIG, as_json: bool = JSON) -> None:
    """Every experiment, one line each."""
    try:
        rows = api.log(root, config)
    except AssayError as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps(rows, indent=2, default=str))
        return
    t = Table()
    for col in ("id", "state", "proposer", "hypothesis", "effect", "interval", "runs"):
        t.add_column(col)
    for r in rows:
        d = r["decision"] or {}
        t.add_row(r["id"], f"[{_STYLE.get(r['state'], '')}]{r['state']}[/]",
                  escape(r["proposer"]), escape(r["hypothesis"][:50]), _pct(d.get("effect")),
                  f"[{_pct(d.get('lo'))}, {_pct(d.get('hi'))}]" if d else "-",
                  str(d.get("runs_used", "-")))
    console.print(t)


@app.command()
def show(exp_id: str = typer.Argument(..., help="An experiment id, e.g. e0003."),
         root: Path = ROOT, config: str | None = CONFIG, as_json: bool = JSON) -> None:
    """One experiment: its change, every decision with its interval and reason, its runs."""
    try:
        data = api.show(exp_id, root, config)
    except AssayError as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps(data, indent=2, default=str))
        return
    console.print(f"[bold]{data['id']}[/] [{_STYLE.get(data['state'], '')}]{data['state']}[/] "
                  f"by {escape(data['proposer'])}: {escape(data['hypothesis'])}")
    if data["note"]:
        console.print(f"reason: {escape(data['note'])}")
    if data["params"]:
        console.print("params: " + escape(", ".join(f"{k}={v}" for k, v in
                                                    data["params"].items())))
    if data["commit"]:
        console.print(f"commit: {data['commit']}")
    if data.get("fingerprint"):
        from .fingerprint import Fingerprint

        fp_lines = Fingerprint.from_dict(data["fingerprint"]).lines()
        console.print("measured on: " + escape("\n  ".join(fp_lines)), highlight=False)
    for d in data["decisions"]:
        console.print(f"  decision {escape('[' + d['rule'] + ']')} {d['verdict']}: effect "
                      f"{_pct(d['effect'])} "
                      f"interval [{_pct(d['lo'])}, {_pct(d['hi'])}] δ {_pct(d['delta'])}, "
                      f"{d['pairs_used']} pairs / {d['runs_used']} runs — {escape(d['reason'])}",
                      highlight=False)
    t = Table(title="runs")
    for col in ("run", "role", "status", "metrics", "slot", "wall s", "reason"):
        t.add_column(col)
    for r in data["runs"]:
        t.add_row(r["run_id"], r["role"], r["status"],
                  ", ".join(f"{k}={v:.4g}" for k, v in r["metrics"].items()), r["worker"],
                  f"{r['wall_s']:.2f}", escape(r["reason"][:60]))
    console.print(t)
    if data["patch"]:
        console.print("[bold]patch[/]")
        console.print(data["patch"], highlight=False, markup=False)


@app.command()
def export(fmt: str = typer.Argument("tsv", help="tsv (results.tsv), jsonl or csv."),
           root: Path = ROOT, config: str | None = CONFIG,
           out: Path | None = typer.Option(None, "--out", "-o", help="Write here, not stdout.")
           ) -> None:
    """Export the journal: results.tsv (karpathy columns), JSONL or CSV."""
    try:
        text = api.export(fmt, root, out, config)
    except (AssayError, ValueError) as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    if out is None:
        sys.stdout.write(text)
    else:
        console.print(f"wrote {out}")


def _register_optional() -> None:
    """Verbs that live in their own subsystems."""
    try:
        from .research.command import research_command
    except ImportError:
        pass
    else:
        app.command("research")(research_command)
    from .finalize.command import finalize_command

    app.command("finalize")(finalize_command)
    try:
        from .faces.commands import register
    except ImportError:
        pass
    else:
        register(app)


_register_optional()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
