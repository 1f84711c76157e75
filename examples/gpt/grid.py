"""A plain grid over train.py's knobs, for when assay itself is not installed (a bare GPU
machine). Each run is a copy of train.py with the knob assignments rewritten, the same way
assay's ``apply = "assign"`` does; results go to a JSON-lines file and a table.

    python grid.py --set TIME_BUDGET=30 --grid TOTAL_BATCH_SIZE=65536,131072 \
        --grid LR_MULT=0.5,1,2 --out grid.jsonl

``--runs "A=1,B=2;A=3,B=4"`` lists runs explicitly instead of a product.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def rewrite(source: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        pattern = re.compile(rf"^{re.escape(name)}\s*=.*$", re.MULTILINE)
        if not pattern.search(source):
            raise SystemExit(f"train.py has no assignment {name} = ...")
        source = pattern.sub(lambda _m, n=name, v=value: f"{n} = {v}", source, count=1)
    return source


def summary(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    block = text.rsplit("\n---\n", 1)
    if len(block) < 2:
        return out
    for line in block[1].splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            out[key.strip()] = value.strip()
    return out


def run(values: dict[str, str], timeout: float, log_dir: Path | None) -> dict[str, str]:
    script = HERE / f"_grid_{os.getpid()}.py"
    script.write_text(rewrite((HERE / "train.py").read_text(), values))
    t0 = time.time()
    try:
        proc = subprocess.run([sys.executable, script.name], cwd=HERE, capture_output=True,
                              text=True, timeout=timeout, check=False)
        text, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        text, rc = str(exc.stdout or "") + "\nTIMEOUT", 124
    finally:
        script.unlink(missing_ok=True)
    name = ",".join(f"{k}={v}" for k, v in values.items())
    if log_dir:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:120]
        (log_dir / f"{safe}.log").write_text(text)
    result = {"run": name, "rc": str(rc), "wall": f"{time.time() - t0:.1f}", **summary(text)}
    if rc != 0:
        result["error"] = (text.strip().splitlines() or [""])[-1][:200]
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", action="append", default=[], help="NAME=VALUE for every run")
    ap.add_argument("--grid", action="append", default=[], help="NAME=V1,V2,...")
    ap.add_argument("--runs", default="", help="explicit runs: A=1,B=2;A=3,B=4")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", default="grid.jsonl")
    ap.add_argument("--logs", default="")
    ap.add_argument("--show", default="val_bpb,mfu_percent,tokens_per_second,num_steps,"
                    "epochs,startup_seconds,peak_vram_mb")
    args = ap.parse_args()
    fixed = dict(s.split("=", 1) for s in args.set)
    if args.runs:
        combos = [dict(kv.split("=", 1) for kv in r.split(",")) for r in args.runs.split(";")]
    else:
        axes = [(g.split("=", 1)[0], g.split("=", 1)[1].split(",")) for g in args.grid]
        combos = [dict(zip([a for a, _ in axes], vals, strict=True))
                  for vals in itertools.product(*[v for _, v in axes])]
    log_dir = Path(args.logs) if args.logs else None
    if log_dir:
        log_dir.mkdir(parents=True, exist_ok=True)
    cols = args.show.split(",")
    rows = []
    with open(args.out, "a", encoding="utf-8") as fh:
        for combo in combos:
            res = run({**fixed, **combo}, args.timeout, log_dir)
            rows.append(res)
            fh.write(json.dumps(res) + "\n")
            fh.flush()
            print(json.dumps(res), flush=True)
    print("\n| run | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for r in rows:
        print(f"| {r['run']} | " + " | ".join(r.get(c, r.get("error", "-"))[:12]
                                             for c in cols) + " |")


if __name__ == "__main__":
    main()
