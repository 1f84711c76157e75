"""How the command line ends on an error: the message on stderr, exit status 2."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import AssayError

__all__ = ["err", "fail"]

err = Console(stderr=True, soft_wrap=True)  # an error (and the path in it) is never wrapped


def fail(exc: AssayError) -> NoReturn:
    """Print ``exc`` as the command's error and exit with status 2."""
    err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
    raise typer.Exit(2)
