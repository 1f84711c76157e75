"""The finalists of a short-budget assay session of examples/gpt, run at 300 s.

A session at a short budget proposes; only runs at the full budget decide (gpt_h200.md: the
width and Muon's learning rate both reversed between 30 s and 300 s). This names the
finalists of a session and runs them:

    python benchmarks/karpathy/finalists.py pick SESSION [--top 2]
    python benchmarks/karpathy/finalists.py run SESSION --out DIR [--top 2] [--cache DIR]

SESSION is the repository the session ran in (its `.assay` journal, its `assay.toml`). The
finalists: the session's final incumbent when it kept anything, then the experiments whose
interval lies above zero without a keep (discarded for want of runs, or measured and left
undecided when the session stopped, a provisional keep waiting for its confirmation say),
by the lower end of the interval, `--top` in all; and always the session's base. Each is a
set of values of the session's `[[params]]`: the base commit's own lines, then what each
keep before it set, then its own. A candidate that is a patch, not values, is left out and
said so.

`run` runs each finalist with side_by_side.py's `run gpt` (examples/gpt's committed
`train.py` with the finalist's values written in, `TIME_BUDGET` as committed), then prints
a table of val_bpb against the base, effects positive when lower (base / finalist - 1),
and a summary line: PASS when the best finalist at 300 s is a keep of the session and has
a lower val_bpb than the base. The records go to `--out` (one JSON a finalist, side_by_side's
form, `best.json` the best one's, and `finalists.json`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(HERE))

from assay import api  # noqa: E402
from assay.errors import AssayError, WorkspaceError  # noqa: E402
from assay.model import ParamValue  # noqa: E402
from assay.repo.workspace import Workspace, held_params  # noqa: E402


@dataclass(frozen=True)
class Finalist:
    label: str  # "base", "e0002", ...
    knobs: dict[str, ParamValue]
    why: str
    kept: bool = False


def pick(session: Path, top: int = 2) -> tuple[list[Finalist], list[str]]:
    """The session's finalists (the base last) and what was left out, in words."""
    target = api.load(session)
    journal = api.open_journal(target, readonly=True)
    try:
        base = journal.base_commit()
    finally:
        journal.close()
    if not base:
        raise SystemExit(f"{session}: no session in its journal (run `assay run` there first)")
    ws = Workspace(target)

    def read(path: str) -> str | None:
        try:
            return ws.file_at(str(base), path)
        except WorkspaceError:
            return None

    declared = {p.name: p.default for p in target.params if p.default is not None}
    values = held_params(target.params, declared, read)
    missing = [p.name for p in target.params if p.name not in values]
    if missing:
        raise SystemExit(f"{session}: the base commit gives no value for {missing}; declare "
                         "a `default` for each in assay.toml")
    exps = api.log(session)
    finalists: list[Finalist] = []
    left: list[str] = []
    knobs = dict(values)  # the incumbent's values as the session went on
    before: dict[str, dict[str, ParamValue]] = {}  # each experiment's incumbent
    kept = ""
    for e in exps:
        before[e["id"]] = dict(knobs)
        if e["state"] == "kept" and e["patch_chars"]:
            raise SystemExit(f"{session}: {e['id']} kept a patch, not values of [[params]]: "
                             "its incumbents cannot be written into examples/gpt's train.py")
        if e["state"] == "kept":
            knobs = {**knobs, **e["params"]}
            kept = e["id"]
    if kept:
        d = next(e for e in exps if e["id"] == kept)["decision"] or {}
        finalists.append(Finalist(kept, dict(knobs), f"the final incumbent (kept {kept}: "
                                  f"{_interval(d)})", kept=True))
    shown = [f.knobs for f in finalists]
    open_or_discarded = ("discarded", "queued", "running", "measured")
    ranked = sorted((e for e in exps if e["state"] in open_or_discarded and e["decision"]
                     and e["decision"]["lo"] is not None and e["decision"]["lo"] > 0),
                    key=lambda e: -float(e["decision"]["lo"]))
    for e in ranked:
        if len(finalists) >= top:
            left.append(f"{e['id']}: beyond --top {top}")
            continue
        if e["patch_chars"]:
            left.append(f"{e['id']}: a patch, not values of [[params]]")
            continue
        mine = {**before[e["id"]], **e["params"]}
        if mine in shown:
            continue
        shown.append(mine)
        what = "measured, not decided" if e["state"] in ("queued", "running", "measured") \
            else e["state"]
        finalists.append(Finalist(e["id"], mine, f"{what}: {_interval(e['decision'])}"))
    finalists.append(Finalist("base", dict(values), "the session's base commit"))
    return finalists, left


def _interval(d: dict[str, Any]) -> str:
    if d.get("effect") is None or d.get("lo") is None or d.get("hi") is None:
        return "no interval"
    return f"{d['effect']:+.2%} [{d['lo']:+.2%}, {d['hi']:+.2%}]"


def flags(knobs: dict[str, ParamValue], committed: str) -> dict[str, str]:
    """The `--set NAME=VALUE` of ``knobs`` that examples/gpt's committed ``train.py``
    (its text ``committed``) does not already hold: those its rewrite would change."""
    from assay.errors import PatchError
    from assay.repo.workspace import python_literal, rewrite_assignment

    out: dict[str, str] = {}
    for name, value in knobs.items():
        try:
            same = rewrite_assignment(committed, name, value, "train.py") == committed
        except PatchError:  # no single line: not held (side_by_side.py says so on a run)
            same = False
        if not same:
            out[name] = python_literal(value)
    return out


def run(session: Path, top: int, out: Path, cache: Path | None) -> bool:
    import side_by_side

    finalists, left = pick(session, top)
    out.mkdir(parents=True, exist_ok=True)
    committed = (ROOT / "examples" / "gpt" / "train.py").read_text()
    records: dict[str, dict[str, Any]] = {}
    for f in finalists:
        knobs = flags(f.knobs, committed)
        print(f"{f.label}: {f.why}; at 300 s with {knobs or 'the committed values'}",
              flush=True)
        records[f.label] = side_by_side.run("gpt", None, knobs, out / f"{f.label}.json", cache)
    base = records["base"]["val_bpb"]
    print()
    print("| finalist | why | values | val_bpb at 300 s | effect vs base | MFU (PaLM) |")
    print("|---|---|---|---|---|---|")
    for f in finalists:
        r = records[f.label]
        effect = base / r["val_bpb"] - 1
        vals = ", ".join(f"{k} {v}" for k, v in sorted(f.knobs.items()))
        print(f"| {f.label} | {f.why} | {vals} | {r['val_bpb']:.6f} | "
              f"{effect:+.2%} | {r['mfu_palm']:.2f} % |")
    for line in left:
        print(f"left out: {line}")
    best = min(finalists, key=lambda f: records[f.label]["val_bpb"])
    ok = best.kept and records[best.label]["val_bpb"] < base
    shutil.copy(out / f"{best.label}.json", out / "best.json")  # side_by_side.py's record
    (out / "finalists.json").write_text(json.dumps(
        {"best": best.label, "pass": ok,
         "finalists": [{"label": f.label, "why": f.why, "knobs": f.knobs, "kept": f.kept,
                        "val_bpb": records[f.label]["val_bpb"]} for f in finalists]},
        indent=1))
    print(f"best at 300 s: {best.label} ({records[best.label]['val_bpb']:.6f}, base "
          f"{base:.6f}); a keep of the session that beats the base: "
          f"{'PASS' if ok else 'FAIL'}")
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, helptext in (("pick", "name the finalists"), ("run", "run them at 300 s")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("session", type=Path, help="the repository the session ran in")
        p.add_argument("--top", type=int, default=2, help="finalists besides the base")
        if name == "run":
            p.add_argument("--out", type=Path, required=True, help="a folder for the records")
            p.add_argument("--cache", type=Path,
                           help="a compile cache to start each run from (a copy of it)")
    a = ap.parse_args(argv)
    if a.top < 1:
        raise SystemExit("--top must be at least 1")
    try:
        if a.cmd == "pick":
            finalists, left = pick(a.session, a.top)
            committed = (ROOT / "examples" / "gpt" / "train.py").read_text()
            for f in finalists:
                knobs = flags(f.knobs, committed)
                sets = " ".join(f"--set {k}={v}" for k, v in knobs.items())
                print(f"{f.label}: {f.why}; {sets or 'the committed values'}")
            for line in left:
                print(f"left out: {line}")
            return 0
        return 0 if run(a.session, a.top, a.out, a.cache) else 1
    except AssayError as exc:
        raise SystemExit(f"{a.session}: {exc}") from None


if __name__ == "__main__":
    sys.exit(main())
