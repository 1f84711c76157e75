"""Find the line of a key in a TOML file, so config errors can point at it.

``tomllib`` gives values but no positions; this scans the text for table headers and
``key =`` lines. It is only used to word error messages, so a miss returns ``None``.
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-\"'.]+)\s*=")


def key_line(text: str, dotted: str) -> int | None:
    """1-based line of ``dotted`` (``"metric.name"``, ``"params[2].low"``) in ``text``."""
    parts = [p for p in re.split(r"\.(?![^\[]*\])", dotted) if p]
    table_parts: list[str] = []
    index: int | None = None
    leaf = parts[-1] if parts else ""
    for p in parts[:-1]:
        m = re.fullmatch(r"(.+)\[(\d+)\]", p)
        if m:
            table_parts.append(m.group(1))
            index = int(m.group(2))
        else:
            table_parts.append(p)
    m_leaf = re.fullmatch(r"(.+)\[(\d+)\]", leaf)
    if m_leaf:  # the key names an array-of-tables entry itself: point at its header
        table_parts.append(m_leaf.group(1))
        index, leaf = int(m_leaf.group(2)), ""
    want = ".".join(table_parts)
    current = ""
    seen: dict[str, int] = {}
    lines = text.splitlines()
    header_line: int | None = None
    for no, line in enumerate(lines, start=1):
        h = _HEADER.match(line)
        if h:
            current = h.group(1).replace(" ", "").replace('"', "")
            count = seen.get(current, -1) + 1
            seen[current] = count
            if current == dotted and index is None and m_leaf is None:
                return no  # the dotted name is a table (a misspelled section)
            if current == want and (index is None or index == count):
                header_line = no
                if not leaf:
                    return no
            continue
        k = _KEY.match(line)
        if not k or not leaf:
            continue
        key = k.group(1).strip("\"'")
        full = f"{current}.{key}" if current else key
        target = f"{want}.{leaf}" if want else leaf
        if full == target and (index is None or seen.get(current, 0) == index):
            return no
    return header_line
