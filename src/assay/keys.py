"""The orchestrator's secrets: read once into memory, gone from its environment.

:func:`take` moves every variable that names a secret (``*_API_KEY``, ``*_TOKEN``,
``*_SECRET``, ``*_PASSWORD``, ``*_KEY``) out of ``os.environ`` into this module, and
overwrites its value in the process's initial environment block, which is what
``/proc/<pid>/environ`` shows (``unsetenv`` alone leaves it there). Any process of the
same user, sandboxed or not, then reads nothing there. :func:`environ` is the
environment with the secrets put back: read a key from it (the LLM client, an agent's
``env`` names, an ``[env] allow`` that names a key on purpose).

What it does NOT protect against: a process that can read this process's memory
(``ptrace`` rights, ``/proc/<pid>/mem``: a same-user process where the kernel's Yama
``ptrace_scope`` is 0), and a key passed on purpose to a child (the agent's own key).
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Mapping

SECRET = re.compile(r"(^|_)(API_KEY|KEY|TOKEN|SECRET|PASSWORD)$")
_VAULT: dict[str, str] = {}


def take() -> list[str]:
    """Move the secrets out of the environment (again after a new one appeared); their
    names."""
    names = [n for n in os.environ if SECRET.search(n.upper())]
    for name in names:
        _VAULT[name] = os.environ[name]
        _wipe(name)
        del os.environ[name]
    return names


def environ() -> dict[str, str]:
    """This process's environment, the secrets :func:`take` moved included."""
    return {**os.environ, **_VAULT}


def get(name: str, environ_: Mapping[str, str] | None = None) -> str | None:
    """One variable, a secret or not (``environ_`` instead of the process's, in tests)."""
    if environ_ is not None:
        return environ_.get(name)
    return _VAULT.get(name, os.environ.get(name))


def _wipe(name: str) -> None:
    """Zero the value of ``name`` where ``/proc/self/environ`` reads it (Linux, glibc)."""
    try:
        table = ctypes.POINTER(ctypes.c_void_p).in_dll(ctypes.CDLL(None), "environ")
    except (OSError, ValueError, AttributeError):
        return
    prefix = name.encode() + b"="
    i = 0
    while table[i]:
        addr = table[i]
        entry = ctypes.string_at(addr)
        if entry.startswith(prefix):
            ctypes.memset(addr + len(prefix), 0, len(entry) - len(prefix))
        i += 1
