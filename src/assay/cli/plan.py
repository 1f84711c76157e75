"""The `assay plan` verb."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import AssayError
from ..planning.plan import Levels, for_repository
from .exit import fail


def plan_command(
        noise: str = typer.Option("", "--noise", help="Run-to-run noise (sd of one run), e.g. "
                                  "3%; default: measured in the journal."),
        delta: str = typer.Option("", "--delta", help="The band δ, e.g. 1%; default: the "
                                  "config's."),
        pairs: int = typer.Option(0, "--pairs", help="The pair budget (max_pairs); default: "
                                  "the config's."),
        power: float = typer.Option(0.9, "--power", help="Requested power for the smallest "
                                    "effect (default 0.9)."),
        trials: int = typer.Option(200, "--trials", help="Simulated decisions per row."),
        rho: str = typer.Option("", "--rho", help="With [fidelity]: the correlation of the "
                                "cheapest level's effects with the last level's, e.g. 0.8; "
                                "default: measured in the journal, else 0.8."),
        candidates: int = typer.Option(20, "--candidates", help="With [fidelity]: "
                                       "candidates in a simulated session."),
        sessions: int = typer.Option(20, "--sessions", help="With [fidelity]: simulated "
                                     "sessions."),
        level_costs: str = typer.Option("", "--level-costs", help="With [fidelity]: seconds "
                                        "per run at each level, e.g. 30,300; default: the "
                                        "measured pace, else the level values."),
        spread: str = typer.Option("", "--spread", help="With [fidelity]: sd of the "
                                   "candidates' true effects, e.g. 2%; default: 2δ."),
        root: Path = typer.Option(Path("."), "--root", "-C", help="The repository."),
) -> None:
    """Simulate the decision settings at a noise level: false keeps, keep rates, runs; with
    [fidelity], the multi-fidelity session against deciding every candidate at the last
    level."""
    try:
        lines = for_repository(root, noise=noise, delta=delta, pairs=pairs, power=power,
                               trials=trials, levels=Levels(rho, candidates, sessions,
                                                            level_costs, spread))
    except AssayError as exc:
        fail(exc)
    for line in lines:
        typer.echo(line)
