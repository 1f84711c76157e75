"""Every error assay raises on purpose.

The tree::

    AssayError                 root: catch this to catch everything assay means to raise
    ├── ConfigError            assay.toml is wrong: carries file, key, line and what is valid
    ├── MetricError            a benchmark's output cannot give the metric: carries the reason
    ├── PatchError             a patch or an edit cannot apply or leaves the editable scope
    ├── WorkspaceError         git or the slot worktrees are in a state assay cannot use
    ├── JournalError           the journal is missing, locked, or from a newer assay
    ├── LockError              another live `assay run` holds the target
    ├── ProposerError          a proposer failed (LLM reply, agent CLI, sweep space)
    ├── ExecutorError          a backend (local, Ray, SkyPilot) failed to run a block
    ├── FinalizeError          `assay finalize` cannot group, branch or measure the kept changes
    ├── ReviewError            a reviewer failed (its command, the LLM reply, the agent CLI)
    ├── CapReached             a spending cap ([run] max_usd, max_tokens) stops the model calls
    ├── StoppedRun             the last run stopped by a rule; `assay run --continue` goes on
    └── MissingDependency      an optional extra is not installed: says which to install

Each message says what was wrong, where, and what to do about it.
"""

from __future__ import annotations


class AssayError(Exception):
    """Root of assay's errors."""


class ConfigError(AssayError):
    """A bad `assay.toml`: names the file, the key, the line and what would be valid."""

    def __init__(
        self, message: str, *, file: str = "", key: str = "", line: int | None = None,
        valid: str = "",
    ) -> None:
        self.file, self.key, self.line, self.valid = file, key, line, valid
        where = file
        if line is not None:
            where += f":{line}"
        parts = [f"{where}: " if where else ""]
        if key:
            parts.append(f"[{key}] ")
        parts.append(message)
        if valid:
            parts.append(f" (valid: {valid})")
        super().__init__("".join(parts))


class MetricError(AssayError):
    """The benchmark output cannot give the metric; the run is INVALID with this reason."""


class PatchError(AssayError):
    """A patch does not apply, escapes the tree, or touches a path outside the editable scope."""


class WorkspaceError(AssayError):
    """git or a slot worktree is in a state assay cannot use."""


class JournalError(AssayError):
    """The journal cannot be opened or written."""


class LockError(AssayError):
    """Another live run holds the target's lock."""


class ProposerError(AssayError):
    """A proposer could not produce a candidate."""


class ExecutorError(AssayError):
    """A backend failed to run a block (not a failing benchmark: that is a result)."""


class FinalizeError(AssayError):
    """Kept changes that cannot become independent branches; nothing was left behind."""


class ReviewError(AssayError):
    """A reviewer could not review a group: says which reviewer and what it returned."""


class CapReached(AssayError):
    """The next model call could pass a spending cap: the message names the cap and the spend."""


class StoppedRun(AssayError):
    """The last run ended at a stop rule (a cap, a run of discards, the metric's target)."""


class MissingDependency(AssayError):
    """An optional dependency is missing; the message names the extra to install."""

    def __init__(self, module: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the Python package '{module}', which is not installed. "
            f"Install it with: pip install 'assay[{extra}]'"
        )


def require(module: str, extra: str, purpose: str) -> object:
    """Import an optional module or raise :class:`MissingDependency` naming the extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependency(module, extra, purpose) from exc
