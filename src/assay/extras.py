"""Optional parts: say which extra a feature needs before any work starts.

:func:`need` checks that a module can be imported (without importing it) and raises
:class:`~assay.errors.MissingDependency`, which names the package and the exact
``pip install 'assay[extra]'``. Callers check at config validation or at a command's start
(``sampler = "gp"`` when the sweep proposer is built, ``assay report`` before it reads the
journal), never at first use in the middle of a run.
"""

from __future__ import annotations

import importlib.util

from .errors import MissingDependency


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package is missing or broken
        return False


def need(module: str, extra: str, purpose: str) -> None:
    """Raise MissingDependency unless ``module`` is installed."""
    if not installed(module):
        raise MissingDependency(module, extra, purpose)
