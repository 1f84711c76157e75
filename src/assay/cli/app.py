"""The `assay` command line: thin verbs over :mod:`assay.api`."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .. import __version__, api, keys
from ..decision.rule import GuardChange
from ..errors import AssayError
from ..faces.terminal import (
    UNPAIRED,
    RunPrinter,
    finished_in,
    level_words,
    number,
    paired_words,
    pct,
    plural,
    print_blocks,
    print_fidelity,
    print_log,
    print_open,
    print_platforms,
    print_spend,
    print_table,
    ratio_words,
)
from ..model import Direction
from ..records import Fingerprint
from ..registry import PROPOSERS
from ..strictjson import dumps
from .exit import err, fail

app = typer.Typer(help="assay: measure every change, keep only what is real.",
                  rich_markup_mode=None,
                  no_args_is_help=True, add_completion=False)
console = Console()

ROOT = typer.Option(Path("."), "--root", "-C", help="The repository (holding assay.toml).")
CONFIG = typer.Option(None, "--config", help="Another config file than <root>/assay.toml.")
JSON = typer.Option(False, "--json", help="Print JSON instead of tables.")

_STYLE = {"kept": "bold green", "discarded": "grey50", "invalid": "yellow", "crashed": "red",
          "conflict": "dark_orange",
          "running": "cyan", "queued": "cyan"}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"assay {__version__}")
        raise typer.Exit()


DEBUG = {"on": False}  # --debug: a command that failed to load shows its traceback


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print assay's version and exit."),
          debug: bool = typer.Option(False, "--debug",
                                     help="Show tracebacks of commands that fail to load.")
          ) -> None:
    """assay: measure every change, keep only what is real."""
    DEBUG["on"] = debug
    keys.take()  # before any child starts: no process can read a key from /proc


@app.command()
def init(root: Path = ROOT, force: bool = typer.Option(False, "--force",
                                                        help="Overwrite an existing assay.toml."),
         metric: str = typer.Option("", help="The metric's name, as the benchmark prints it."),
         direction: str = typer.Option("", help="maximize or minimize."),
         bench: str = typer.Option("", help="The benchmark command."),
         checks: str = typer.Option("", help="The correctness check command."),
         build: str = typer.Option("", help="The build command."),
         editable: str = typer.Option("", help="Editable globs, comma-separated."),
         ) -> None:
    """Detect the project's layout and write an assay.toml (asks only in a terminal)."""
    answers = {"metric": metric, "direction": direction, "bench": bench, "checks": checks,
               "build": build, "editable": editable}
    ask = (lambda q, d: typer.prompt(q, default=d)) if sys.stdin.isatty() else None
    try:
        path = api.init(root, force=force, ask=ask, answers=answers,
                        show=lambda text: console.print(escape(text), highlight=False))
    except AssayError as exc:
        fail(exc)
    console.print(f"wrote [bold]{path}[/]; review it, then run [bold]assay run[/]")


@app.command()
def run(root: Path = ROOT, config: str | None = CONFIG,
        budget: int | None = typer.Option(None, help="Experiments to run (default: [run] budget)."),
        proposer: str | None = typer.Option(None, help=PROPOSERS.help()),
        slots: int | None = typer.Option(None, help="Parallel slots (default: [run] slots)."),
        name: str | None = typer.Option(None, help="Run name: kept commits go to assay/<name>."),
        max_hours: float | None = typer.Option(
            None, help="Stop after this long (hours); no block starts that the limit would "
                       "cut, at the recent blocks' pace."),
        verbose: bool = typer.Option(False, "--verbose", "-v",
                                     help="Also print every block and re-measurement."),
        as_json: bool = typer.Option(False, "--json", help="Stream JSON lines, one per record."),
        from_head: bool = typer.Option(False, "--from-head", help="Start from your branch's "
                                       "HEAD, replaying the kept changes it lacks."),
        retry: bool = typer.Option(False, "--retry", help="Measure again queued patches that "
                                   "were already tried."),
        unconfined: bool = typer.Option(False, "--unconfined", help="Where no sandbox works, "
                                        "run llm and agent candidates anyway, with your full "
                                        "rights (every experiment is marked unconfined)."),
        carry_on: bool = typer.Option(False, "--continue", help="Go on after the last run "
                                      "stopped at a stop rule (a spending cap, "
                                      "stop_after_discards, the metric's target)."),
        ) -> None:
    """Run the loop: propose, measure against the incumbent, keep what is real.

    Prints one line per decided experiment (id, verdict, improvement, interval, runs,
    seconds, hypothesis); -v adds blocks and re-measurements; --json streams the same as
    JSON lines. Ctrl-C stops cleanly (running blocks are measured again on resume), exit 130.
    """
    try:
        target = api.load(root, config, slots=slots, proposer=proposer, budget=budget)
    except AssayError as exc:
        fail(exc)
    jpath = api.journal_path(target)
    printer = RunPrinter(console, verbose=verbose, as_json=as_json, total=target.run.budget,
                         done_before=finished_in(jpath), journal_path=jpath)
    try:
        summary = api.run(root, budget=budget, proposer=proposer, slots=slots, name=name,
                          max_hours=max_hours, on_event=printer.on_event, signals=True,
                          config=config, from_head=from_head,
                          retry=retry, unconfined=unconfined, carry_on=carry_on)
    except AssayError as exc:
        printer.close()
        fail(exc)
    finally:
        printer.close()
    printer.summary(summary, target.metric.name, target.metric.unit, target.metric.direction)
    if printer.exit_code:
        raise typer.Exit(printer.exit_code)
    if summary.failed:
        raise typer.Exit(1)


@app.command()
def status(root: Path = ROOT, config: str | None = CONFIG, as_json: bool = JSON) -> None:
    """The incumbent, the best so far, and counts by state."""
    try:
        st = api.status(root, config)
    except AssayError as exc:
        fail(exc)
    if as_json:
        typer.echo(dumps(st, indent=2))
        return
    inc = st["incumbent"] or {}
    if st.get("unreproduced"):
        console.print(f"[bold red]warning:[/] {escape(st['unreproduced'])}", highlight=False)
    if st.get("unconfined"):
        console.print("[bold yellow]unconfined:[/] experiments of this journal ran without a "
                      "sandbox (marked `(unconfined)` in `assay log`)")
    console.print(f"metric [bold]{st['metric']}[/] ({st['direction']}), "
                  f"{plural(st['experiments'], 'experiment')}: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(st["counts"].items())))
    ver = st.get("verification")
    if ver:
        d = Direction(st["direction"])
        if ver["measured"] and ver["current"]:
            console.print("improvement (paired, baseline vs final best): "
                          + escape(paired_words(ver["measured"], d, st["metric"], st["unit"])),
                          highlight=False)
        else:
            comp = ver["compounded"]
            ratio = ratio_words(comp, d, st["metric"], st["unit"])
            console.print("improvement: not verified since the last keep (`assay verify` "
                          f"measures it); the {ver['kept']} kept effect(s) compound to "
                          f"{pct(comp)}{f' ({ratio})' if ratio else ''}", highlight=False)
    console.print(f"{UNPAIRED}: baseline {number(st['baseline'], st['unit'])}, best "
                  f"{number(st['best'], st['unit'])}; incumbent {str(inc.get('commit', ''))[:12]} "
                  f"on {st['branch']}", highlight=False, soft_wrap=not console.is_terminal)
    print_spend(console, st["spend"])
    cal = st.get("calibration")
    if cal:
        console.print(f"noise: {escape(str(cal.get('message', '')))}")
    for line in st.get("awaiting", []):  # [fidelity]: what the next levels would cost
        console.print(f"next: {escape(line)}", highlight=False)
    print_fidelity(console, st.get("fidelity"))
    print_open(console, [(e["id"], e["decision"]["effect"], e["decision"]["lo"],
                          e["decision"]["hi"], e["decision"]["reason"], e["hypothesis"])
                         for e in st["open"]])
    if len(st["slots"]) > 1:  # per-slot (per-GPU) speed of the incumbent, and its noise
        for s in st["slots"]:
            gpu = f" (GPU {','.join(map(str, s['gpus']))})" if s["gpus"] else ""
            noise = "-" if s["noise"] is None else f"{s['noise']:.2%}"
            q = f", quarantined: {escape(s['reason'])}" if s["quarantined"] else ""
            console.print(f"  slot {escape(s['name'])}{gpu}: incumbent "
                          f"{number(s['incumbent_value'], st['unit'])} over "
                          f"{s['incumbent_runs']} runs, noise {noise}{q}", highlight=False)


@app.command()
def verify(root: Path = ROOT, config: str | None = CONFIG, as_json: bool = JSON,
           per_keep: bool = typer.Option(False, "--per-keep", help="Measure each kept change "
                                         "alone against its parent instead.")) -> None:
    """Measure the final best against the baseline (ABBA blocks, the run's decision rule):
    the run's total improvement with its interval, stored in the journal."""
    try:
        v = api.verify(root, config, report=None if as_json else
                       lambda m: console.print(escape(m), highlight=False), per_keep=per_keep)
    except AssayError as exc:
        fail(exc)
    if as_json:
        typer.echo(dumps(v, indent=2))
        return
    if per_keep:
        gone = [k["id"] for k in v["per_keep"] if not k["reproduced"]]
        console.print(f"not reproduced alone: {', '.join(gone)}" if gone else
                      "every keep is reproduced alone against its parent", highlight=False)
        return
    console.print(f"[bold]improvement (paired, baseline {v['base'][:12]} vs final best "
                  f"{v['final'][:12]}):[/] "
                  + escape(paired_words(v, Direction(v["direction"]), v["metric"], v["unit"])),
                  highlight=False)
    reason = v["reason"] if v["reason"].startswith(v["state"]) else \
        f"{v['state']}: {v['reason']}"
    console.print(f"{escape(reason)} ({v['runs']} runs; journal {escape(v['journal'])})",
                  highlight=False)


@app.command()
def log(root: Path = ROOT, config: str | None = CONFIG, as_json: bool = JSON,
        limit: int | None = typer.Option(None, "--limit", "-n", help="At most this many rows."),
        offset: int = typer.Option(0, "--offset", help="Skip this many rows first."),
        oldest: bool = typer.Option(False, "--oldest", help="Oldest first (default: newest)."),
        ) -> None:
    """Experiments, one line each, newest first (page with --limit/--offset)."""
    if (limit is not None and limit < 0) or offset < 0:
        fail(AssayError(f"--limit {limit} / --offset {offset}: both must be >= 0"))
    try:
        rows = api.log(root, config, limit=limit, offset=offset, newest_first=not oldest)
    except AssayError as exc:
        fail(exc)
    if as_json:
        typer.echo(dumps(rows, indent=2))
        return
    print_log(console, rows)


@app.command()
def show(exp_id: str = typer.Argument(..., help="An experiment id, e.g. e0003."),
         root: Path = ROOT, config: str | None = CONFIG, as_json: bool = JSON) -> None:
    """One experiment: its change, every decision with its interval and reason, its runs."""
    try:
        data = api.show(exp_id, root, config)
    except AssayError as exc:
        fail(exc)
    if as_json:
        typer.echo(dumps(data, indent=2))
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
    if data.get("spent_words"):
        console.print(f"model calls: {escape(data['spent_words'])}", highlight=False)
    if data.get("fingerprint"):
        fp_lines = Fingerprint.from_dict(data["fingerprint"]).lines()
        console.print("measured on: " + escape("\n  ".join(fp_lines)), highlight=False)
    # Blocks against more than one incumbent: a keep moved it while this one was measured.
    moved = len({str((b.get("incumbent") or {}).get("commit")) for b in data["blocks"]}) > 1
    prev_pairs = 0
    for d in data["decisions"]:
        if moved and d["pairs_used"] < prev_pairs:
            console.print("  the incumbent moved (a keep): measured again against the new one; "
                          "the pairs above are set aside", highlight=False, style="magenta")
        prev_pairs = d["pairs_used"]
        console.print(f"  decision {escape('[' + d['rule'] + ']')}"
                      f"{level_words(data.get('levels', []), d.get('details') or {})} "
                      f"{d['verdict']}: effect "
                      f"{pct(d['effect'])} "
                      f"interval [{pct(d['lo'])}, {pct(d['hi'])}] δ {pct(d['delta'])}, "
                      f"{d['pairs_used']} pairs / {d['runs_used']} runs — {escape(d['reason'])}",
                      highlight=False)
    final = (data.get("decision") or {}).get("details", {}).get("platforms")
    if final:
        print_platforms(console, final)
    at = f" at {data['guards_level']}" if data.get("guards_level") else ""
    for g in data.get("guards") or []:
        console.print(f"  guard{at} " + escape(GuardChange(**{k: v for k, v in g.items()
                                                          if k != "regressed"}).describe()),
                      highlight=False)
    print_blocks(console, data["blocks"], data["runs"], data.get("levels", []))
    t = Table(title="runs")
    for col in ("run", "role", "status", "metrics", "slot", "wall s", "reason"):
        t.add_column(col)
    for r in data["runs"]:
        t.add_row(r["run_id"], r["role"], r["status"],
                  ", ".join(f"{k}={number(v)}" for k, v in r["metrics"].items()), r["slot"],
                  f"{r['wall_s']:.2f}",
                  escape(r["reason"][:60] if console.is_terminal else r["reason"]))
    print_table(console, t)
    if data["patch"]:
        console.print("[bold]patch[/]")
        console.print(data["patch"], highlight=False, markup=False)
    if data.get("params_diff"):
        console.print("[bold]parameters, as the diff of the file they rewrite[/]")
        console.print(data["params_diff"], highlight=False, markup=False)


@app.command()
def reset(root: Path = ROOT, config: str | None = CONFIG,
          yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation.")
          ) -> None:
    """Archive the journal, remove assay's worktrees and run branches (your branch stays)."""
    if not yes:
        if not sys.stdin.isatty():
            err.print("error: assay reset needs a confirmation; pass --yes to reset without "
                      "a terminal")
            raise typer.Exit(2)
        if not typer.confirm("Archive the journal and delete assay's worktrees and run "
                             "branches?", default=False):
            console.print("nothing changed")
            raise typer.Exit(1)
    try:
        done = api.reset(root, config)
    except AssayError as exc:
        fail(exc)
    for line in done or ["nothing to reset"]:
        console.print(escape(line), highlight=False)


@app.command()
def export(fmt: str = typer.Argument("tsv", help="tsv (results.tsv), jsonl or csv."),
           root: Path = ROOT, config: str | None = CONFIG,
           out: Path | None = typer.Option(None, "--out", "-o", help="Write here, not stdout."),
           for_proposers: bool = typer.Option(
               False, "--for-proposers", help="For a proposer to read (e.g. pi-autoresearch's "
               "log.jsonl): reasons holding held-out results are withheld."),
           state: Path | None = typer.Option(
               None, "--state", help="Instead: write the run's whole state (journal, its key, "
               "the run's commits) into this one file, for `assay import --state` in a clone "
               "on another machine."),
           ) -> None:
    """Export the journal: results.tsv (karpathy columns), JSONL or CSV; or, with --state,
    everything a session needs to go on elsewhere."""
    if state is not None:
        try:
            info = api.export_state(state, root, config)
        except AssayError as exc:
            fail(exc)
        console.print(f"wrote {escape(info.path)}: run {escape(info.run)}, "
                      f"{plural(info.experiments, 'experiment')}, incumbent {info.incumbent[:12]}"
                      f", {info.files} files, {info.bytes / 1024:.0f} KiB; on the next machine: "
                      "assay import --state FILE, then assay run", highlight=False)
        return
    try:
        text = api.export(fmt, root, out, config, for_proposers=for_proposers)
    except (AssayError, ValueError) as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    if out is None:
        sys.stdout.write(text)
    else:
        console.print(f"wrote {out}")


@app.command("import")
def import_(state: Path = typer.Option(..., "--state", help="A file `assay export --state` "
                                       "wrote."),
            root: Path = ROOT, config: str | None = CONFIG,
            force: bool = typer.Option(False, "--force", help="Replace this clone's journal "
                                       "(it is archived under .assay/archive/ first)."),
            ) -> None:
    """Restore a run's state into this clone, so that `assay run` goes on from it."""
    try:
        done = api.import_state(state, root, config, force=force)
    except AssayError as exc:
        fail(exc)
    for line in done:
        console.print(escape(line), highlight=False)


def _unloadable(name: str, exc: BaseException) -> None:
    """Register ``name`` as a command that says why it could not be loaded (exit 2)."""
    trace = "".join(traceback.format_exception(exc))

    def broken(ctx: typer.Context) -> None:
        if DEBUG["on"]:
            err.print(trace, markup=False, highlight=False)
        err.print(f"[bold red]error:[/] the `{name}` command could not be loaded: "
                  f"{escape(type(exc).__name__ + ': ' + str(exc))}. "
                  + ("" if DEBUG["on"] else f"Run `assay --debug {name}` for the traceback; ")
                  + "reinstall assay (pip install -e .) if a file is missing.",
                  highlight=False)
        raise typer.Exit(2)

    app.command(name, help=f"(could not be loaded: {type(exc).__name__})",
                context_settings={"allow_extra_args": True,
                                  "ignore_unknown_options": True})(broken)


def _core_verb() -> bool:
    """Whether this process's command line names one of the verbs above (``status``,
    ``log``…): the subsystems' verbs are then not loaded, which keeps their imports out of
    every quick command's start-up."""
    core = {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}
    word = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    return word in core


def _register_optional() -> None:
    """Verbs that live in their own subsystems: every one is registered, loaded or not
    (unless a core verb was asked for)."""
    if _core_verb():
        return
    try:
        from .research import research_command
    except Exception as exc:  # a bug in the subsystem must not read as "No such command"
        _unloadable("research", exc)
    else:
        app.command("research")(research_command)
    try:
        from .finalize import finalize_command
    except Exception as exc:
        _unloadable("finalize", exc)
    else:
        app.command("finalize")(finalize_command)
    try:
        from .plan import plan_command
    except Exception as exc:
        _unloadable("plan", exc)
    else:
        app.command("plan")(plan_command)
    try:
        from .faces import register
    except Exception as exc:
        for name in FACES_COMMANDS:
            _unloadable(name, exc)
    else:
        register(app)


FACES_COMMANDS = ("report", "serve", "mcp", "stop")
_register_optional()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
