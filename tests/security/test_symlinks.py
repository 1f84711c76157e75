"""Links and modes are judged on the applied tree, whatever the patch's spelling (finding 3).

``git apply`` takes ``new file mode 0120000`` as a symbolic link; a check that reads the
patch's text for ``120000`` lets it through, and the measured code is then a file outside
the repository, in neither the patch nor the journal. ``new file mode 0160000`` makes a
submodule the same way: the measured code would be a commit the patch only names.
"""

from __future__ import annotations

from pathlib import Path

from tests.security.attacks import BY_NAME
from tests.security.kit import run_attack


def test_a_zero_padded_symlink_mode_is_refused(tmp_path: Path) -> None:
    verdict, outcome = run_attack(BY_NAME["symlink-padded-mode"], tmp_path)
    assert verdict.blocked, verdict.line
    assert not [e for e in outcome.experiments if e["state"] == "kept"]


def test_a_zero_padded_submodule_mode_is_refused(tmp_path: Path) -> None:
    verdict, _ = run_attack(BY_NAME["submodule-padded-mode"], tmp_path)
    assert verdict.blocked, verdict.line
