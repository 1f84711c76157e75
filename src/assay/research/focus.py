"""The target's own code: which files research reads as "mine", and where hot symbols live."""

from __future__ import annotations

import platform
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ..config.spec import Target, glob_match
from .config import ResearchConfig
from .gaps import Side, collect
from .profile import ProfileResult
from .sources import CODE_EXTS, code_files, walk_files


def focus_files(target: Target, cfg: ResearchConfig) -> list[Path]:
    """The target's own code: ``focus`` dirs/globs, else the editable globs."""
    root = target.root
    out: list[Path] = []
    if cfg.focus:
        for item in cfg.focus:
            p = (root / item)
            if p.is_dir():
                out.extend(f for f in walk_files(p) if f.suffix in CODE_EXTS)
            elif p.is_file():
                out.append(p)
            else:
                out.extend(code_files(root, [item]))
        return sorted(set(out))
    for f in walk_files(root):
        if f.suffix in CODE_EXTS and any(
                glob_match(f.relative_to(root).as_posix(), g) for g in target.editable):
            out.append(f)
    return out


def focus_side(target: Target, cfg: ResearchConfig) -> Side:
    files = focus_files(target, cfg)
    label = cfg.focus[0].rstrip("/").rsplit("/", 1)[-1] if len(cfg.focus) == 1 else \
        (target.run.name or target.root.name)
    return collect(target.root, label, files=files, op_prefixes=cfg.op_prefixes,
                   cite_base=target.root, cite_prefix="")


_SYMBOL_SUFFIX = re.compile(r"(\.(constprop|isra|part|cold|lto_priv)\.\d+)+$")


def without_templates(symbol: str) -> str:
    """A C++ symbol without its template arguments: ``gemv_lut<block<4, 8> >`` is
    ``gemv_lut`` (nested brackets included; ``operator<`` and the like are left alone)."""
    out: list[str] = []
    depth = 0
    for i, ch in enumerate(symbol):
        opens = i > 0 and (symbol[i - 1].isalnum() or symbol[i - 1] == "_") \
            and not symbol[:i].endswith("operator")
        if ch == "<" and (depth or opens):
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    return "".join(out) if depth == 0 else symbol


def locate_symbols(prof: ProfileResult, focus: Side) -> None:
    """Point native hot spots (perf gives a library) at their definitions in the code."""
    where: dict[str, list[tuple[str, int]]] = {}
    for name, ev in focus.defs:
        where.setdefault(name, []).append((ev.path, ev.line))
    for i, h in enumerate(prof.hotspots):
        bare = _SYMBOL_SUFFIX.sub("", without_templates(h.function).split("(", 1)[0])
        bare = bare.rsplit("::", 1)[-1].split()[-1] if bare.strip() else bare
        found = this_arch(where.get(bare, []))
        if found is not None:
            prof.hotspots[i] = replace(h, file=found[0], line=found[1], in_target=True)
        elif h.in_target:
            prof.hotspots[i] = replace(h, in_target=False)


_ARCH_TAGS = {
    "x86_64": {"x86", "x86_64", "amd64", "x64"}, "amd64": {"x86", "x86_64", "amd64", "x64"},
    "aarch64": {"arm", "arm64", "aarch64"}, "arm64": {"arm", "arm64", "aarch64"},
    "ppc64le": {"powerpc", "ppc", "ppc64"}, "riscv64": {"riscv", "rv64"},
    "s390x": {"s390", "s390x"}, "loongarch64": {"loongarch"},
}
_ALL_ARCH = set().union(*_ARCH_TAGS.values()) | {"wasm"}


def this_arch(places: Sequence[tuple[str, int]]) -> tuple[str, int] | None:
    """Of several definitions of one symbol, the one built for this machine."""
    if len(places) <= 1:
        return places[0] if places else None
    mine = _ARCH_TAGS.get(platform.machine().lower(), set())
    for path, line in places:
        if mine & set(path.lower().split("/")):
            return path, line
    for path, line in places:
        if not _ALL_ARCH & set(path.lower().split("/")):
            return path, line
    return places[0]
