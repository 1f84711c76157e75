"""assay's own git commands, all through :func:`git`.

Every command runs with no hook: a hook a candidate planted in the repository
(post-checkout, reference-transaction) would run outside any sandbox. ``plain`` commands
read no user or system configuration and print paths and diffs the one way assay parses
(no CRLF conversion, no quoted paths, ``a/`` and ``b/`` prefixes), whatever the machine.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, overload

from ..errors import WorkspaceError

PLAIN_CONFIG = ("core.autocrlf=false", "core.quotepath=off", "diff.noprefix=false",
                "diff.mnemonicPrefix=false")


@overload
def git(args: Sequence[str], cwd: Path | str, *, input: str | None = None,
        env: Mapping[str, str] | None = None, check: bool = True, plain: bool = False,
        binary: Literal[False] = False, timeout: float | None = None,
        error: Callable[[str], Exception] = WorkspaceError) -> subprocess.CompletedProcess[str]:
    ...


@overload
def git(args: Sequence[str], cwd: Path | str, *, input: bytes | None = None,
        env: Mapping[str, str] | None = None, check: bool = True, plain: bool = False,
        binary: Literal[True], timeout: float | None = None,
        error: Callable[[str], Exception] = WorkspaceError
        ) -> subprocess.CompletedProcess[bytes]:
    ...


def git(args: Sequence[str], cwd: Path | str, *, input: str | bytes | None = None,
        env: Mapping[str, str] | None = None, check: bool = True, plain: bool = False,
        binary: bool = False, timeout: float | None = None,
        error: Callable[[str], Exception] = WorkspaceError) -> subprocess.CompletedProcess[Any]:
    """Run ``git args`` in ``cwd``; ``error`` (a message) when it fails and ``check`` is set.

    The environment is this process's (``plain``: less every ``GIT_`` variable and the user
    and system configuration) with prompts off and the C locale, then ``env`` over it.
    ``binary`` reads and writes bytes instead of text.
    """
    if plain:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        full_env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    else:
        full_env = dict(os.environ)
    full_env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
    if env:
        full_env.update(env)
    config = ["core.hooksPath=/dev/null", *(PLAIN_CONFIG if plain else ())]
    cmd = ["git", *(x for c in config for x in ("-c", c)), *args]
    proc = subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, text=not binary,
                          env=full_env, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        said = proc.stderr or proc.stdout
        if isinstance(said, bytes):
            said = said.decode(errors="replace")
        raise error(f"git {' '.join(args)} failed in {cwd}: {said.strip()}")
    return proc
