"""The `assay plan` verb."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import AssayError
from ..planning.plan import for_repository
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
        root: Path = typer.Option(Path("."), "--root", "-C", help="The repository."),
) -> None:
    """Simulate the decision settings at a noise level: false keeps, keep rates, runs."""
    try:
        lines = for_repository(root, noise=noise, delta=delta, pairs=pairs, power=power,
                               trials=trials)
    except AssayError as exc:
        fail(exc)
    for line in lines:
        typer.echo(line)
