"""The `assay finalize` verb."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..errors import AssayError
from ..faces.terminal import print_table
from ..finalize import pr
from ..finalize.run import Result, finalize

console = Console()
err = Console(stderr=True, soft_wrap=True)  # errors (and their paths) are never wrapped


def finalize_command(
    root: Path = typer.Option(Path("."), "--root", "-C", help="The repository (holding "
                              "assay.toml)."),
    config: str | None = typer.Option(None, "--config", help="Another config file than "
                                      "<root>/assay.toml."),
    groups: Path | None = typer.Option(None, "--groups", help="A TOML file of [[group]] "
                                       "tables (name, experiments) to use instead of the "
                                       "proposed grouping."),
    waive: list[str] = typer.Option([], "--waive", help="A review finding id to waive "
                                    "(repeatable)."),
    no_measure: bool = typer.Option(False, "--no-measure", help="Make and review the branches "
                                    "without measuring them."),
) -> None:
    """Turn the run's kept commits into reviewed, separately measured branches with PR texts."""
    def say(msg: str) -> None:
        console.print(escape(msg), highlight=False)

    try:
        res = finalize(root, groups_file=groups, waive=waive, measure_groups=not no_measure,
                       config=config, report=say)
    except AssayError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        err.print("nothing was changed: branches made by this finalize were removed",
                  highlight=False)
        raise typer.Exit(2) from None
    print_result(res)


def print_result(res: Result) -> None:
    t = Table(title=f"groups of assay/{res.run} (merge-base {res.base[:12]})")
    for col in ("group", "experiments", "files", "why together", "branch"):
        t.add_column(col)
    for o in res.outcomes:
        t.add_row(o.group.slug, ", ".join(o.group.labels), ", ".join(o.group.files),
                  escape(o.group.reason), o.branch if o.finalized else "(blocked)")
    print_table(console, t)
    if all(o.alone is None and o.without is None for o in res.outcomes):
        console.print("not measured (--no-measure): the branches were made and reviewed, "
                      "and no group was measured", highlight=False)
    else:
        m = Table(title="each group on its own, and the final tree without it")
        for col in ("group", "alone", "interval", "verdict", "without it", "interval",
                    "verdict", "status"):
            m.add_column(col)
        for o in res.outcomes:
            a, w = o.alone, o.without
            m.add_row(o.group.slug, pr.pct(a.effect if a else None), pr.interval(a),
                      a.state if a else "-", pr.pct(w.effect if w else None), pr.interval(w),
                      w.state if w else "-", escape(o.status))
        print_table(console, m)
    for o in res.outcomes:
        for f in o.review.findings:
            mark = " waived" if f.id in o.review.waived else ""
            console.print(f"  {f.id} [{'red' if f.blocking else 'yellow'}]{f.severity}{mark}[/] "
                          f"{escape(f.where)}: {escape(f.message)}", highlight=False)
    for n in res.notes:
        console.print(f"note: {escape(n)}", highlight=False)
    console.print(f"pull-request texts and CHANGES.md: {res.folder}")
    blocked = [o for o in res.outcomes if not o.finalized]
    if blocked:
        console.print(f"{len(blocked)} group(s) blocked by review; fix the change or pass "
                      "--waive ID for each finding you accept")
