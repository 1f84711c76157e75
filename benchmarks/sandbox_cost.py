"""What the sandbox costs per run: the quickstart's bench, sandbox on vs off, interleaved.

Copies ``examples/quickstart`` into a fresh git repository (as ``make demo`` does), makes one
slot tree, and runs its benchmark there through :func:`assay.bench.process.run` in ABBA order
(A: in the sandbox the run would get, B: without), ``--rounds`` times, in one session; also
``true`` the same way, which is the sandbox's cost alone. Prints the median wall time per
run of each, and their difference.

    python benchmarks/sandbox_cost.py [--rounds 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from assay import api, sandbox
from assay.bench import contain, process
from assay.repo.workspace import Workspace

HERE = Path(__file__).resolve().parent
QUICKSTART = HERE.parent / "examples" / "quickstart"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10, help="ABBA rounds (4 runs each)")
    args = ap.parse_args()
    found = sandbox.probe()
    if not found.ok:
        print(f"no sandbox here: {found.why}")
        return 2
    sys.path.insert(0, str(QUICKSTART))
    from demo import prepare  # the quickstart's own copier

    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    with tempfile.TemporaryDirectory(prefix="assay-sandbox-cost-") as tmp:
        root = prepare(Path(tmp) / "quickstart")
        target = api.load(root)
        tree = Workspace(target, "main").tree("s0-b")
        env = process.scrubbed_env(target.env)
        spec = contain.spec_for(target, tree, env)
        assert spec is not None
        logs = Path(tmp) / "logs"
        times: dict[tuple[str, bool], list[float]] = {}
        for cmd in ("true", target.bench.cmd):
            for rnd in range(args.rounds):
                for on in (True, False, False, True):
                    t0 = time.perf_counter()
                    r = process.run(cmd, cwd=tree, env=env, timeout_s=120,
                                    stdout_path=logs / "o", stderr_path=logs / "e",
                                    limits=target.limits, sandbox=spec if on else None)
                    wall = time.perf_counter() - t0
                    if r.exit_code != 0:
                        print(f"{cmd!r} failed (sandbox {'on' if on else 'off'}, round "
                              f"{rnd + 1}): {r.stderr.strip()[-300:]}")
                        return 1
                    times.setdefault((cmd, on), []).append(wall * 1000)
        print(f"sandbox: {found.tool}; {args.rounds} ABBA rounds; load "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for cmd in ("true", target.bench.cmd):
            on = statistics.median(times[(cmd, True)])
            off = statistics.median(times[(cmd, False)])
            print(f"{cmd:<16} median ms per run: sandbox on {on:8.1f}, off {off:8.1f}, "
                  f"difference {on - off:+7.1f} ms ({(on - off) / off:+.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
