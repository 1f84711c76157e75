"""Red team: every attack on assay's containment, run as a user would, one line each.

    python benchmarks/red_team.py                 # every attack, timed benches
    python benchmarks/red_team.py --scripted      # the tests' scripted benches (faster)
    python benchmarks/red_team.py --only secrets --only kill-nine

The attacks are the ones ``tests/security`` runs (``tests/security/attacks.py`` holds
them, with what each one tries and how it is judged). For each: a fresh git repository
with a small bench like the quickstart's (``work.py`` editable, ``bench.py`` timing it on
the CPU clock and ``checks.py`` protected), the attack's patches queued under ``patches/``
(or its agent command, or its forger), a real ``assay run`` as a subprocess, then ``assay
status``, ``log``, ``show`` and ``export`` as the user reads them, and a look at the files
and processes the attack aimed at. It prints ``blocked: how`` or ``NOT BLOCKED: what
happened`` per attack as it goes, then a table, then one summary line that ends ``PASS``
only when every attack was blocked (exit 0), ``FAIL`` otherwise (exit 1).

Run it as root and as an unprivileged user too: what a sandbox can do differs between
them (user namespaces, who owns the files). For example, as root, from a checkout of this
repository::

    useradd -m redteam
    git clone . /home/redteam/assay && chown -R redteam: /home/redteam/assay
    runuser -l redteam -c 'cd ~/assay && python3 -m venv .venv && .venv/bin/pip install -e .'
    runuser -l redteam -c 'cd ~/assay && .venv/bin/python benchmarks/red_team.py'

``-l`` gives the user their own login environment (``runuser -u`` keeps root's, whose
``PATH`` names folders the user cannot read). The user needs a virtual environment of their
own: some attacks write into the site-packages of the interpreter that runs the bench
(``sys.executable``). Each attack's repository, home
and scratch files live in one temporary folder, removed at the end (``--keep`` keeps it);
what an attack left elsewhere (a ``.pth`` file, a cache in ``/tmp``, a process) is
removed after it is judged.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.security.attacks import ATTACKS, BY_NAME
from tests.security.kit import SCRIPTED, TIMED, Verdict, run_attack


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", choices=sorted(BY_NAME), default=[],
                    help="run only this attack (repeatable)")
    ap.add_argument("--scripted", action="store_true",
                    help="scripted benches (the tests' setting) instead of timed ones")
    ap.add_argument("--keep", action="store_true", help="keep the attacks' folders")
    args = ap.parse_args(argv)
    attacks = [BY_NAME[n] for n in args.only] if args.only else list(ATTACKS)
    setting = SCRIPTED if args.scripted else TIMED
    work = Path(tempfile.mkdtemp(prefix="assay-red-team-"))
    print(f"red team: {len(attacks)} attacks, {'scripted' if args.scripted else 'timed'} "
          f"benches, in {work}", flush=True)
    rows: list[tuple[str, str, Verdict, float]] = []
    try:
        for attack in attacks:
            t0 = time.monotonic()
            try:
                verdict, _ = run_attack(attack, work, setting)
            except Exception as exc:  # an attack that breaks the harness is not a pass
                verdict = Verdict(False, f"the attack could not be judged: "
                                         f"{type(exc).__name__}: {exc}")
            rows.append((attack.name, attack.promise, verdict, time.monotonic() - t0))
            print(f"{attack.name}: {verdict.line}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print()
    width = max(len(r[0]) for r in rows)
    print(f"{'attack':<{width}}  {'promise':<18}  {'verdict':<11}  {'s':>5}")
    for name, promise, verdict, secs in rows:
        print(f"{name:<{width}}  {promise:<18}  "
              f"{'blocked' if verdict.blocked else 'NOT BLOCKED':<11}  {secs:5.1f}")
    open_ = [r[0] for r in rows if not r[2].blocked]
    print()
    print(f"red team: {len(rows)} attacks, {len(rows) - len(open_)} blocked, {len(open_)} not "
          f"blocked{' (' + ', '.join(open_) + ')' if open_ else ''}: "
          f"{'FAIL' if open_ else 'PASS'}")
    return 1 if open_ else 0


if __name__ == "__main__":
    sys.exit(main())
