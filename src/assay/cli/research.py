"""``assay research``: the command-line verb (registered by the CLI with ``app.command``)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from ..config.spec import load
from ..errors import AssayError
from ..faces.terminal import print_hypotheses
from ..journal.store import Journal
from ..research import run_research


def research_command(
    root: Path = typer.Option(Path("."), "--root", "-C",
                              help="The repository (holding assay.toml)."),
    config: Path | None = typer.Option(None, "--config",
                                       help="Another config file than <root>/assay.toml."),
    source: list[str] = typer.Option(
        [], "--source", help="A document, directory, repository path or git URL to read "
        "(repeatable; PATH#subdir names a part of a repository)."),
    offline: bool = typer.Option(False, "--offline",
                                 help="Do not search arXiv or GitHub, and clone nothing."),
    no_profile: bool = typer.Option(False, "--no-profile",
                                    help="Do not run the benchmark under a profiler."),
    measure: bool = typer.Option(False, "--measure",
                                 help="Measure this machine's peaks even where the hardware "
                                 "table knows them."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Read before proposing: profile, compare implementations, rank hypotheses.

    Writes the hypotheses to the journal and the brief to .assay/research.md.
    """
    console = Console(stderr=as_json)
    try:
        target = load(root, str(config) if config is not None else None)
        journal = Journal.open(target.state_dir / "journal.sqlite")
        try:
            with console.status("research: starting") as status:
                def progress(msg: str) -> None:
                    status.update(f"research: {msg}")
                    console.log(msg)

                result = run_research(target, journal, extra_sources=tuple(source),
                                      offline=True if offline else None,
                                      profile=not no_profile, progress=progress,
                                      measure=True if measure else None)
        finally:
            journal.close()
    except AssayError as exc:
        Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None

    if as_json:
        print(json.dumps(result.to_json(), indent=1, default=str))
        return
    prof = result.profile
    if prof is not None:
        console.print(f"profiler: [bold]{prof.profiler}[/bold]"
                      + (f" — hottest: {escape(prof.hotspots[0].label)} "
                         f"{prof.hotspots[0].share:.0%}"
                         if prof.hotspots else " — no hot spots"))
    if result.placement is not None:
        console.print(f"roofline: [bold]{result.placement.bound}[/bold] — "
                      f"{escape(result.placement.explanation)}")
    print_hypotheses(console, result.hypotheses)
    for note in result.notes:
        # a note names URLs and paths: never wrapped inside them
        console.print(f"[yellow]note:[/yellow] {escape(note)}", soft_wrap=True)
    console.print(f"brief: {result.brief_path}", soft_wrap=True)
