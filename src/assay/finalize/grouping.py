"""Kept commits into groups: one group per set of changes that share files.

Rules, in order:

1. the kept commits keep the order they were kept in, inside a group and across groups
   (a group sits where its first commit sat);
2. no two groups share a file: commits touching a common file are one group;
3. a group that does not build or pass the checks alone on the merge-base is merged with
   the other group it needs (the first one, in order, with which it passes), and the reason
   is kept in words. A user's grouping (``--groups FILE``) replaces steps 1 and 2; step 3
   still runs on it.

A groups file is TOML::

    [[group]]
    name = "cache"                      # becomes the branch assay/<run>-pr/<slug>
    experiments = ["e0002", "e0005"]    # every kept experiment, each exactly once
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FinalizeError


@dataclass(frozen=True)
class Change:
    """One kept commit on the run branch, with what the journal knows of it."""

    commit: str
    parent: str
    files: tuple[str, ...]
    experiment: str = ""  # '' for a commit the journal did not make
    hypothesis: str = ""
    sources: tuple[str, ...] = ()
    hypothesis_id: int | None = None
    effect: float | None = None
    lo: float | None = None
    hi: float | None = None
    params: Mapping[str, object] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.experiment or self.commit[:12]


@dataclass(frozen=True)
class Group:
    slug: str
    changes: tuple[Change, ...]
    reason: str = ""  # why these changes are together

    @property
    def files(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for c in self.changes:
            for f in c.files:
                seen.setdefault(f, None)
        return tuple(seen)

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(c.label for c in self.changes)

    @property
    def title(self) -> str:
        first = self.changes[0].hypothesis or self.slug
        if len(self.changes) == 1:
            return first
        return f"{', '.join(self.files)}: {first} (and {len(self.changes) - 1} more)"


def _name_of(members: Sequence[Change]) -> str:
    """A group's name: its one change's hypothesis, or the files its changes share."""
    if len(members) == 1 and members[0].hypothesis:
        return members[0].hypothesis
    files = [f for c in members for f in c.files]
    return "-".join(dict.fromkeys(f.rsplit("/", 1)[-1] for f in files)) or members[0].label


def slugify(text: str, limit: int = 40) -> str:
    """A branch-name part of ``text``: at most ``limit`` characters, cut between words."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if len(slug) > limit:
        cut = slug[: limit + 1].rfind("-")  # the last word boundary that fits
        slug = slug[:cut] if cut >= limit // 2 else slug[:limit]
    return slug.rstrip("-") or "change"


def _unique(slugs: Sequence[str]) -> list[str]:
    out: list[str] = []
    for s in slugs:
        name, n = s, 2
        while name in out:
            name = f"{s}-{n}"
            n += 1
        out.append(name)
    return out


def _ordered(changes: Sequence[Change], parts: Sequence[Sequence[Change]]) -> list[list[Change]]:
    pos = {c.commit: i for i, c in enumerate(changes)}
    groups = [sorted(p, key=lambda c: pos[c.commit]) for p in parts if p]
    return sorted(groups, key=lambda g: pos[g[0].commit])


def _why_together(members: Sequence[Change]) -> str:
    if len(members) == 1:
        return "one kept change"
    shared: dict[str, list[str]] = {}
    for c in members:
        for f in c.files:
            shared.setdefault(f, []).append(c.label)
    common = [f"{f} ({', '.join(who)})" for f, who in shared.items() if len(who) > 1]
    return "they change the same files: " + "; ".join(common)


def propose(changes: Sequence[Change]) -> list[Group]:
    """Groups of changes connected by shared files, in the order the changes were kept."""
    owner: dict[str, int] = {}  # file -> group index (union-find over files)
    parent: list[int] = []

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, c in enumerate(changes):
        parent.append(i)
        for f in c.files:
            if f in owner:
                a, b = find(owner[f]), find(i)
                parent[max(a, b)] = min(a, b)
            else:
                owner[f] = i
    buckets: dict[int, list[Change]] = {}
    for i, c in enumerate(changes):
        buckets.setdefault(find(i), []).append(c)
    members = _ordered(changes, list(buckets.values()))
    slugs = _unique([slugify(_name_of(m)) for m in members])
    return [Group(s, tuple(m), _why_together(m)) for s, m in zip(slugs, members, strict=True)]


def read_groups(path: Path, changes: Sequence[Change]) -> list[Group]:
    """A user's grouping; every kept change exactly once, no file in two groups."""
    where = str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise FinalizeError(f"{where}: cannot read the groups file: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise FinalizeError(f"{where}: not valid TOML: {exc}; expected [[group]] tables with "
                            "name and experiments") from None
    unknown_top = set(data) - {"group"}
    if unknown_top:
        raise FinalizeError(f"{where}: unknown key(s) {sorted(unknown_top)}; only [[group]] "
                            "tables are read")
    raw = data.get("group")
    if not isinstance(raw, list) or not raw:
        raise FinalizeError(f"{where}: no [[group]] tables; write one per branch, each with "
                            "name = \"...\" and experiments = [\"e0001\", ...]")
    by_label = {c.label: c for c in changes}
    by_label.update({c.commit: c for c in changes})
    used: dict[str, str] = {}
    parts: list[list[Change]] = []
    names: list[str] = []
    for i, g in enumerate(raw):
        at = f"{where}: group {i + 1}"
        if not isinstance(g, dict):
            raise FinalizeError(f"{at}: must be a table with name and experiments")
        extra = set(g) - {"name", "experiments"}
        if extra:
            raise FinalizeError(f"{at}: unknown key(s) {sorted(extra)}; valid: name, experiments")
        name = g.get("name")
        ids = g.get("experiments")
        if not isinstance(name, str) or not name.strip():
            raise FinalizeError(f"{at}: name must be a non-empty string")
        if (not isinstance(ids, list) or not ids
                or not all(isinstance(x, str) for x in ids)):
            raise FinalizeError(f"{at} ({name}): experiments must be a non-empty list of "
                                "experiment ids such as \"e0003\"")
        members: list[Change] = []
        for x in ids:
            c = by_label.get(x)
            if c is None:
                raise FinalizeError(f"{at} ({name}): {x!r} is not a kept change of this run "
                                    f"(kept: {', '.join(c.label for c in changes)})")
            if c.commit in used:
                raise FinalizeError(f"{at} ({name}): {x} is already in group {used[c.commit]!r};"
                                    " each kept change goes in exactly one group")
            used[c.commit] = name
            members.append(c)
        parts.append(members)
        names.append(name)
    missing = [c.label for c in changes if c.commit not in used]
    if missing:
        raise FinalizeError(f"{where}: kept change(s) {', '.join(missing)} are in no group; "
                            "put each in one group")
    file_owner: dict[str, str] = {}
    for name, members in zip(names, parts, strict=True):
        for c in members:
            for f in c.files:
                other = file_owner.setdefault(f, name)
                if other != name:
                    raise FinalizeError(f"{where}: groups {other!r} and {name!r} both change "
                                        f"{f}; a file may belong to one group only")
    order = _ordered(changes, parts)
    first = {c.commit: n for n, m in zip(names, parts, strict=True) for c in m}
    slugs = _unique([slugify(first[m[0].commit]) for m in order])
    return [Group(s, tuple(m), f"grouped by {where}") for s, m in zip(slugs, order, strict=True)]


Check = Callable[[Sequence[Group]], str]  # '' when the groups together build and pass checks


def merge(a: Group, b: Group, changes: Sequence[Change], reason: str) -> Group:
    members = _ordered(changes, [[*a.changes, *b.changes]])[0]
    first, second = (a, b) if members[0] in a.changes else (b, a)
    why = "; ".join(r for r in (first.reason, second.reason, reason) if r)
    return Group(slugify(_name_of(members)), tuple(members), why)


def merge_dependent(groups: Sequence[Group], changes: Sequence[Change],
                    check: Check) -> tuple[list[Group], list[str]]:
    """Merge each group that fails alone with the first group it passes with.

    Returns the groups and, for each merge, its reason. A group that fails with every
    single other group is an error: the kept changes themselves do not pass.
    """
    out = list(groups)
    notes: list[str] = []
    while True:
        failing = None
        for g in out:
            why = check([g])
            if why:
                failing = (g, why)
                break
        if failing is None or len(out) == 1:
            if failing is not None:
                raise FinalizeError(f"all kept changes together fail on the merge-base: "
                                    f"{failing[1]}; the run branch itself does not pass")
            return out, notes
        g, why = failing
        partner = next((h for h in out if h is not g and not check([g, h])), None)
        if partner is None:
            raise FinalizeError(f"group {g.slug} ({', '.join(g.labels)}) fails alone on the "
                                f"merge-base ({why}) and with every other single group; "
                                "group the changes yourself with --groups FILE")
        reason = (f"merged {g.slug} with {partner.slug}: {g.slug} alone fails ({why}) and "
                  f"passes together with {partner.slug}")
        notes.append(reason)
        merged = merge(g, partner, changes, reason)
        idx = min(out.index(g), out.index(partner))
        out = [h for h in out if h is not g and h is not partner]
        out.insert(idx, merged)
        slugs = _unique([h.slug for h in out])
        out = [h if h.slug == s else Group(s, h.changes, h.reason)
               for h, s in zip(out, slugs, strict=True)]
