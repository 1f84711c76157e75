"""`make demo`: copy the quickstart into a fresh git repository and let assay improve it.

The copy lives in ``.demo/quickstart`` at the top of this checkout (ignored by git), so the
journal stays there for ``assay status``, ``assay log`` and ``assay show`` afterwards.
Runs offline, without an LLM, on two CPU cores: about 20 experiments of 1-second benchmark
runs, some 6 minutes of CPU time; the wall time grows with the machine's load (15 minutes
measured on a 2-core machine shared with other jobs).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEST = HERE.parent.parent / ".demo" / "quickstart"
SKIP = {".assay", "__pycache__", "demo.py"}


def prepare(dest: Path = DEST) -> Path:
    """A fresh git repository at ``dest`` holding the quickstart as shipped."""
    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=assay demo", "-c", "user.email=demo@localhost",
                        *args], cwd=dest, check=True, capture_output=True)

    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for item in HERE.iterdir():
        if item.name in SKIP:
            continue
        if item.is_dir():
            shutil.copytree(item, dest / item.name, ignore=shutil.ignore_patterns(*SKIP))
        else:
            shutil.copy2(item, dest / item.name)
    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-qm", "quickstart: the target as shipped")
    return dest


def main() -> int:
    root = prepare()
    # Benchmarks call `python`: make it this interpreter, whatever the shell's PATH holds.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    print(f"assay demo: a fresh copy of examples/quickstart in {root}\n")
    from assay.cli.app import app

    try:
        code = app(["run", "--root", str(root)], standalone_mode=False)
    except KeyboardInterrupt:
        return 130
    if isinstance(code, int) and code:
        return code  # 130 after Ctrl-C, 1 when the target is broken, 2 on a config error
    rel = os.path.relpath(root)
    bin_dir = os.path.relpath(Path(sys.executable).parent)
    print(f"\nexplore the journal:\n  {bin_dir}/assay status -C {rel}\n"
          f"  {bin_dir}/assay log -C {rel}\n  {bin_dir}/assay show e0001 -C {rel}\n"
          f"  git -C {rel} log --oneline assay/quickstart")
    return 0


if __name__ == "__main__":
    sys.exit(main())
