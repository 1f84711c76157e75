"""The CLI verbs of the faces: ``report``, ``serve``, ``mcp`` and ``stop``."""

from __future__ import annotations

from pathlib import Path

import typer

from .. import api
from ..errors import AssayError
from ..extras import need
from ..faces import mcp as mcp_mod
from ..faces import report as report_mod
from ..faces import serve as serve_mod

ROOT = typer.Option(Path("."), "--root", "-C", help="The repository (holding assay.toml).")
CONFIG = typer.Option(None, "--config", help="Another config file than <root>/assay.toml.")


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(2)


def report(root: Path = ROOT, config: str | None = CONFIG,
           out: Path | None = typer.Option(None, "--out", "-o",
                                           help="Where to write (default .assay/report.html)."),
           ) -> None:
    """Write one self-contained HTML report (opens with no network)."""
    try:
        need("plotly", "faces", "`assay report` (its charts inline plotly.js)")
        target = api.load(root, config)
        path = report_mod.write(target, out)
    except AssayError as exc:
        _fail(str(exc))
        return
    typer.echo(f"wrote {path}")


def serve(root: Path = ROOT, config: str | None = CONFIG,
          host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
          port: int = typer.Option(8765, "--port", help="Port (0 picks a free one)."),
          poll_ms: int = typer.Option(1000, "--poll-ms", help="How often pages refresh."),
          ) -> None:
    """Serve the report's pages live while a run writes the journal (read-only)."""
    try:
        need("plotly", "faces", "`assay serve` (its pages chart with plotly.js)")
        target = api.load(root, config)
    except AssayError as exc:
        _fail(str(exc))
        return

    def ready(url: str) -> None:
        typer.echo(f"serving {target.root.name} at {url} (Ctrl-C to stop)")

    try:
        serve_mod.serve(target, host, port, max(100, poll_ms), ready=ready)
    except OSError as exc:
        _fail(f"cannot listen on {host}:{port}: {exc}")


def mcp(root: Path = ROOT, config: str | None = CONFIG) -> None:
    """Run the MCP server on stdio (tools: run_experiment, status, log, best, show,
    add_hypothesis, stop)."""
    try:
        need("mcp", "faces", "`assay mcp` (the MCP server)")
        server = mcp_mod.build_server(root, config)
    except AssayError as exc:
        _fail(str(exc))
        return
    except ImportError as exc:
        _fail(f"the MCP server needs the `mcp` package: pip install 'assay[faces]' ({exc})")
        return
    mcp_mod.serve_stdio(server)


def stop(root: Path = ROOT, config: str | None = CONFIG) -> None:
    """Ask a running loop to stop gracefully (creates .assay/stop)."""
    try:
        target = api.load(root, config)
    except AssayError as exc:
        _fail(str(exc))
        return
    result = mcp_mod.stop(target)
    typer.echo(result["message"])


def register(app: typer.Typer) -> None:
    app.command("report")(report)
    app.command("serve")(serve)
    app.command("mcp")(mcp)
    app.command("stop")(stop)
