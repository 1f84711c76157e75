"""Which files belong to the holdout: never shown to a proposer, never in its checkout.

The holdout is the ``[scope] holdout`` globs and the files the ``[commands] holdout``
command names on its command line.
"""

from __future__ import annotations

import shlex

from ..config.spec import Target, glob_match


def holdout_files(target: Target, names: list[str]) -> set[str]:
    """The paths among ``names`` that belong to the holdout and never reach a proposer."""
    globs = list(target.holdout_files)
    named: set[str] = set()
    if target.holdout is not None:
        try:
            words = shlex.split(target.holdout.cmd)
        except ValueError:
            words = target.holdout.cmd.split()
        named = {w.removeprefix("./") for w in words}
    return {n for n in names if n in named or any(glob_match(n, g) for g in globs)}
