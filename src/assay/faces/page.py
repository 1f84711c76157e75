"""The HTML shell shared by the report and the live dashboard.

A page is a header, an empty ``<main id="app">``, its configuration and data as embedded
JSON, and ``app.js``, which draws everything from that data (and, on live pages, keeps
polling the page's JSON twin). The report inlines every script, plotly.js included, so it
opens with no network; live pages load plotly.js from the server itself.
"""

from __future__ import annotations

import html
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from ..strictjson import dumps

DETAIL_CHUNK = 500  # experiments' details per packed tag of a report


@cache
def asset(name: str) -> str:
    return (resources.files("assay.faces") / "static" / name).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """plotly.js, from the plotly package (no network)."""
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())


def _embed(value: Any) -> str:
    """JSON safe inside a <script> element (no `</script>`, no `<!--`)."""
    return (dumps(value).replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("&", "\\u0026").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _inline_script(code: str) -> str:
    return "<script>" + code.replace("</script", "<\\/script") + "</script>"


def _packed(value: Any) -> str:
    """JSON, gzipped and base64-encoded: the report's data in a fraction of the bytes
    (app.js unpacks it with the browser's DecompressionStream)."""
    import base64
    import gzip

    return base64.b64encode(gzip.compress(dumps(value).encode("utf-8"), compresslevel=6,
                                          mtime=0)).decode("ascii")


def render(*, title: str, subtitle: str, config: dict[str, Any], data: Any,
           inline: bool, base: str = "/", live: bool = False, packed: bool = False) -> str:
    """One complete HTML page. ``inline``: embed every asset (the self-contained report);
    ``packed``: embed the data gzipped (large reports)."""
    if inline:
        head_assets = f"<style>{asset('app.css')}</style>\n" + _inline_script(plotly_js())
        app = _inline_script(asset("app.js"))
    else:
        head_assets = (f'<link rel="stylesheet" href="{base}static/app.css">\n'
                       f'<script src="{base}static/plotly.min.js"></script>')
        app = f'<script src="{base}static/app.js"></script>'
    live_box = ('<span class="live" id="live"><span class="dot"></span><span>connecting…</span>'
                '</span>' if live else "")
    if packed and isinstance(data, dict) and "details" in data:
        # The experiments' details (most of a large report's bytes; nothing on the first
        # screen needs them) in chunks of DETAIL_CHUNK experiments, in the table's order,
        # each in a tag of its own that app.js unpacks when one of them is opened.
        data = dict(data)
        details = data.pop("details")
        ids = [r["id"] for r in data.get("experiments", [])]
        config = config | {"detail_chunk": DETAIL_CHUNK}
        tags = [f'<script id="assay-data" type="application/gzip+base64">{_packed(data)}'
                '</script>']
        for k in range(0, len(ids), DETAIL_CHUNK):
            part = {i: details[i] for i in ids[k:k + DETAIL_CHUNK] if i in details}
            tags.append(f'<script id="assay-details-{k // DETAIL_CHUNK}" '
                        f'type="application/gzip+base64">{_packed(part)}</script>')
        data_tag = "\n".join(tags)
    elif packed:
        data_tag = (f'<script id="assay-data" type="application/gzip+base64">{_packed(data)}'
                    '</script>')
    else:
        data_tag = f'<script id="assay-data" type="application/json">{_embed(data)}</script>'

    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
{head_assets}
</head>
<body>
<header class="top"><h1>{html.escape(title)}</h1><span class="where">{html.escape(subtitle)}</span>
{live_box}</header>
<main id="app"></main>
<script id="assay-config" type="application/json">{_embed(config)}</script>
{data_tag}
{app}
</body>
</html>
"""
