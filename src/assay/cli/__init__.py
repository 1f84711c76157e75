"""The command line (the only user of typer)."""
