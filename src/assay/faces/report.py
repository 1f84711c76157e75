"""`assay report`: one self-contained HTML file (plotly.js inlined, no network to view it)."""

from __future__ import annotations

import time
from pathlib import Path

from ..config.spec import Target
from . import page
from .data import open_readonly, report_data


def build(target: Target) -> str:
    """The report's HTML for the target's journal (an empty report when there is none)."""
    journal = open_readonly(target)
    try:
        data = report_data(target, journal)
    finally:
        if journal is not None:
            journal.close()
    stamp = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(data["generated_at"]))
    n = len(data["experiments"])
    v = data.get("verification") or {}
    paired = (f" · improvement (paired, baseline vs final best) {v['words']}"
              if v.get("current") and v.get("words") else "")
    doubt = f"warning: {v['unreproduced']} · " if v.get("unreproduced") else ""
    return page.render(
        title=f"assay report: {target.root.name}",
        subtitle=f"{doubt}{data['metric']['name']} · {n} experiment{'s' if n != 1 else ''}"
                 f"{paired} · generated {stamp}",
        config={"mode": "report", "page": "overview", "base": "", "interval": 0},
        data=data, inline=True, packed=True)


def write(target: Target, out: str | Path | None = None) -> Path:
    """Write the report (default ``.assay/report.html``); returns its path."""
    path = Path(out) if out is not None else target.state_dir / "report.html"
    if not path.is_absolute():
        path = Path.cwd() / path
    path.parent.mkdir(parents=True, exist_ok=True)
    text = build(target)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path
