"""The targets a CMake project defines, as CMake itself lists them.

``assay init`` names build targets in ``cmake --build build --target ...``; a name taken
from the bench command (``./build/bin/softmax-oracle``) need not be a target (a custom
command's output, an ``OUTPUT_NAME``, a script), and CMake then stops with "No rule to make
target". :func:`cmake_targets` configures the project in a scratch folder with the Unix
Makefiles generator and reads ``cmake --build <dir> --target help``; the scratch folder is
removed afterwards. This is the one place ``init`` runs a program.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["cmake_targets"]

_LISTED = re.compile(r"^\.\.\. ([^\s(]+)", re.MULTILINE)
_BUILTIN = {"all", "clean", "depend", "edit_cache", "rebuild_cache", "install", "test",
            "list_install_components", "install/local", "install/strip", "package",
            "package_source"}


def cmake_targets(root: Path, timeout_s: float = 300.0) -> tuple[set[str] | None, str]:
    """(the project's own targets, '') or (None, why they could not be listed)."""
    exe = shutil.which("cmake")
    if exe is None:
        return None, "cmake is not installed"
    with tempfile.TemporaryDirectory(prefix="assay-init-cmake-") as scratch:
        try:
            conf = subprocess.run([exe, "-S", str(root), "-B", scratch, "-G", "Unix Makefiles",
                                   "-DCMAKE_BUILD_TYPE=Release"], capture_output=True,
                                  text=True, timeout=timeout_s)
            if conf.returncode != 0:
                tail = (conf.stderr or conf.stdout).strip().splitlines()[-3:]
                return None, "cmake could not configure the project: " + " ".join(tail)
            listed = subprocess.run([exe, "--build", scratch, "--target", "help"],
                                    capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None, f"configuring with cmake took more than {timeout_s:.0f} s"
    if listed.returncode != 0:
        return None, "cmake --build --target help failed"
    names = {n for n in _LISTED.findall(listed.stdout) if n not in _BUILTIN}
    return {n for n in names if not n.endswith((".o", ".i", ".s", ".obj"))}, ""
