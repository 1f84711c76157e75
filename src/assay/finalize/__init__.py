"""`assay finalize`: kept commits into reviewed, separately measured pull-request branches.

Modules: :mod:`.grouping` (kept commits into groups), :mod:`.branches` (git plumbing and
rollback), :mod:`.measure` (one comparison with the run's loop), :mod:`.review`
(reviewers and findings), :mod:`.pr` (pull-request texts), :mod:`.run` (the steps in order),
:mod:`.command` (the CLI verb).
"""

from .run import Result, finalize

__all__ = ["Result", "finalize"]
