"""examples/gpt against karpathy/autoresearch's `train.py`, same corpus, same GPU.

One program per call (a 300 s run with an empty compile cache takes about 6.5 minutes),
then a table of both:

    python benchmarks/karpathy/side_by_side.py run gpt --out gpt.json
    python benchmarks/karpathy/side_by_side.py run karpathy --train PATH/train.py --out k.json
    python benchmarks/karpathy/side_by_side.py table gpt.json k.json

or two runs each (or `--runs N`), interleaved (examples/gpt, karpathy, examples/gpt,
karpathy), over as many calls as it takes: each call runs the next runs that fit in its
`--seconds` and leaves their records in DIR; the call that completes them prints the table
of the means:

    python benchmarks/karpathy/side_by_side.py rounds DIR --karpathy PATH/train.py \
        [--gpt-train PATH/train.py] [--runs 2] [--seconds 540]
    python benchmarks/karpathy/side_by_side.py table DIR/*.json

(on a machine that keeps nothing, DIR is a folder that travels with the checkout, and the
call copies it back out afterwards: `... rounds DIR ...; cp -r DIR "$OUT"/`).

`run gpt --train PATH` (and `rounds --gpt-train PATH`) runs that file as examples/gpt's
`train.py`, beside examples/gpt's `prepare.py`: a session's final best, say (`git show
assay/RUN:train.py` in the session's repository). examples/gpt always runs with
`TIME_BUDGET` 300: a file that holds another value has it rewritten, and the record says so.

karpathy's `train.py` is not part of this repository: fetch it (karpathy/autoresearch)
and pass its path. It runs unchanged beside the two stand-ins in this folder (`kernels`:
attention by PyTorch SDPA with the cuDNN backend, full causal on every layer;
`prepare`: examples/gpt's corpus in order, 2048-token sequences, the 8192-token vocabulary
and examples/gpt's `evaluate_bpb`). Both programs start with an empty TorchInductor and
Triton cache, unless `--cache DIR` names a compile cache to start from (a copy of it: an
assay slot's `.assay/cache/SLOT`, which holds `torchinductor_cache_dir` and
`triton_cache_dir`); the record says which (`cache`). `run gpt --set NAME=VALUE` rewrites a
knob of examples/gpt's `train.py` in the copy that runs (the checkout is never written).

MFU is counted the same way for both, over the dense bf16 peak of the GPU
(`assay.hardware`): PaLM count 6N + 12·L·T·d and causal count 6N + 6·L·T·d, N the weights
that multiply activations (12·L·d² + d·V for karpathy's model). karpathy's tokens/s leaves
out its first 10 steps, as its own MFU does. `table` ends with the line
`side-by-side 300s: examples/gpt val_bpb X mfu_palm P; karpathy val_bpb Y mfu_palm Q` (the
means over each program's records), a line naming the runs in the order they started, and
a summary line: PASS when examples/gpt has the lower val_bpb and an MFU (PaLM) at least
karpathy's.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GPT = ROOT / "examples" / "gpt"
SUMMARY = re.compile(r"^(\w+):\s+(\S+)\s*$")
KNOB = re.compile(r"^(\w+)=(.+)$")
WARMUP_STEPS = 10  # karpathy's program leaves its first 10 steps out of the budget
BUDGET_S = 300.0  # examples/gpt's TIME_BUDGET in every run here
RUN_S = 480.0  # a 300 s run's wall time until one is recorded (prepare, cold compile, eval)


def summary(text: str) -> dict[str, str]:
    """The `key: value` lines after the last `---` line."""
    lines = text.replace("\r", "\n").splitlines()
    cut = max((i for i, ln in enumerate(lines) if ln.strip() == "---"), default=-1)
    out: dict[str, str] = {}
    for ln in lines[cut + 1:]:
        m = SUMMARY.match(ln.strip())
        if m:
            out[m.group(1)] = m.group(2)
    return out


def rewrite(source: str, knobs: dict[str, str]) -> str:
    for name, value in knobs.items():
        pattern = re.compile(rf"^{re.escape(name)}\s*=.*$", re.MULTILINE)
        if not pattern.search(source):
            raise SystemExit(f"examples/gpt/train.py has no assignment {name} = ...")
        source = pattern.sub(f"{name} = {value}", source, count=1)
    return source


def at_budget(source: str) -> tuple[str, str | None]:
    """``source`` (an examples/gpt train.py) with TIME_BUDGET at BUDGET_S, and the value it
    held when that had to be rewritten (None when it already was)."""
    m = re.search(r"^TIME_BUDGET\s*=\s*([^#\n]+)", source, re.MULTILINE)
    if m is None:
        raise SystemExit("the train.py to run has no line `TIME_BUDGET = ...`")
    try:
        held = float(m.group(1).strip())
    except ValueError:
        held = float("nan")
    if held == BUDGET_S:
        return source, None
    return rewrite(source, {"TIME_BUDGET": repr(BUDGET_S)}), m.group(1).strip()


def peak_flops() -> float:
    sys.path.insert(0, str(ROOT / "src"))
    import torch

    from assay import hardware

    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
    peak = hardware.peak_flops(name, "bf16") if name else None
    if peak is None:
        raise SystemExit(f"no bf16 peak known for the GPU {name or '(none found)'}: MFU "
                         "cannot be counted")
    return peak


def execute(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> float:
    """Run, echoing the output (progress lines included) and keeping it in ``log``."""
    start = time.monotonic()
    with open(log, "w", encoding="utf-8") as fh:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            sys.stdout.write(line)
        code = proc.wait()
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)} in {cwd} exited with {code}; its output: {log}")
    return time.monotonic() - start


def run(program: str, train: Path | None, knobs: dict[str, str], out: Path,
        cache: Path | None = None) -> dict[str, Any]:
    if program == "karpathy" and (train is None or not train.is_file()):
        raise SystemExit("run karpathy needs --train PATH: karpathy/autoresearch's "
                         "train.py, fetched for the run")
    if program == "gpt" and train is not None and not train.is_file():
        raise SystemExit(f"run gpt --train {train}: no such file (an examples/gpt train.py)")
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    rewritten: str | None = None
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"),
                                                         os.environ.get("PYTHONPATH")])))
    t0 = time.monotonic()
    subprocess.run([sys.executable, "prepare.py"], cwd=GPT, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    prepare_s = time.monotonic() - t0
    fingerprint = subprocess.run([sys.executable, "prepare.py", "--fingerprint"], cwd=GPT,
                                 env=env, check=True, capture_output=True, text=True).stdout
    work = Path(tempfile.mkdtemp(prefix=f"side-by-side-{program}-"))
    env["TORCHINDUCTOR_CACHE_DIR"] = str(work / "inductor")
    env["TRITON_CACHE_DIR"] = str(work / "triton")
    if cache is not None:
        for var, name in (("TORCHINDUCTOR_CACHE_DIR", "torchinductor_cache_dir"),
                          ("TRITON_CACHE_DIR", "triton_cache_dir")):
            if not (cache / name).is_dir():
                raise SystemExit(f"--cache {cache}: no {name} folder in it (expected an "
                                 "assay slot's compile cache, .assay/cache/SLOT)")
            shutil.copytree(cache / name, env[var])
    run_dir = work / "program"
    run_dir.mkdir()
    if program == "gpt":
        for f in GPT.glob("*.py"):
            shutil.copy(f, run_dir / f.name)
        src = rewrite((train or GPT / "train.py").read_text(), knobs)
        src, rewritten = at_budget(src)
        (run_dir / "train.py").write_text(src)
    else:
        assert train is not None
        src = train.read_text()
        shutil.copy(train, run_dir / "train.py")
        for name in ("kernels.py", "prepare.py"):
            shutil.copy(HERE / name, run_dir / name)
        env["GPT_PREPARE"] = str(GPT / "prepare.py")
    log = out.with_suffix(".log")
    wall = execute([sys.executable, "train.py"], run_dir, env, log)
    s = summary(log.read_text(encoding="utf-8"))
    try:
        rec: dict[str, Any] = {
            "program": program, "train_sha256": hashlib.sha256(src.encode()).hexdigest(),
            "knobs": knobs, "val_bpb": float(s["val_bpb"]),
            "training_seconds": float(s["training_seconds"]),
            "total_seconds": float(s["total_seconds"]),
            "peak_vram_mb": float(s["peak_vram_mb"]), "wall_s": round(wall, 1),
            "prepare_s": round(prepare_s, 1), "fingerprint": fingerprint.strip().splitlines(),
            "cache": "empty" if cache is None else f"copied from {cache}",
            "started": started, "train": str(train) if train else "committed"}
        if rewritten is not None:
            rec["time_budget_was"] = rewritten
        rec["startup_s"] = rec["total_seconds"] - rec["training_seconds"]
        peak = peak_flops()
        if program == "gpt":
            tps = float(s["tokens_per_second"])
            rec.update(tokens_per_second=tps, mfu_palm=float(s["mfu_palm_percent"]),
                       mfu_causal=float(s["mfu_percent"]), steps=int(s["num_steps"]),
                       tokens_M=float(s["total_tokens_M"]))
        else:
            text = log.read_text(encoding="utf-8")
            m = re.search(r"^Model config: (\{.*\})\s*$", text, re.MULTILINE)
            if m is None:
                raise KeyError("Model config line")
            cfg = ast.literal_eval(m.group(1))
            layers, dim = int(cfg["n_layer"]), int(cfg["n_embd"])
            seq, vocab = int(cfg["sequence_len"]), int(cfg["vocab_size"])
            steps = int(s["num_steps"])
            per_step = round(float(s["total_tokens_M"]) * 1e6 / steps / seq) * seq
            tps = per_step * (steps - WARMUP_STEPS) / rec["training_seconds"]
            n = 12 * layers * dim * dim + dim * vocab
            palm = 6 * n + 12 * layers * seq * dim
            causal = 6 * n + 6 * layers * seq * dim
            rec.update(tokens_per_second=tps, mfu_palm=100 * palm * tps / peak,
                       mfu_causal=100 * causal * tps / peak, steps=steps,
                       tokens_M=per_step * steps / 1e6, tokens_per_step=per_step)
    except (KeyError, ValueError) as exc:
        raise SystemExit(f"{program}: the run's summary lacks {exc} (its output: {log})"
                         ) from None
    out.write_text(json.dumps(rec, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({k: rec[k] for k in ("program", "val_bpb", "tokens_per_second",
                                          "mfu_palm", "startup_s")}))
    return rec


def mean(records: list[dict[str, Any]], key: str) -> float:
    return sum(float(r[key]) for r in records) / len(records)


def table(gpts: list[dict[str, Any]], kars: list[dict[str, Any]]) -> bool:
    """Both programs side by side, each figure the mean over its records."""
    if not gpts or not kars:
        raise SystemExit(f"table needs records of both programs: {len(gpts)} of "
                         f"examples/gpt, {len(kars)} of karpathy")
    rows = [("val_bpb", "val_bpb", "{:.6f}"), ("tokens/s (steady)", "tokens_per_second",
             "{:,.0f}"), ("MFU, PaLM count", "mfu_palm", "{:.2f} %"),
            ("MFU, causal count", "mfu_causal", "{:.2f} %"), ("optimizer steps", "steps", "{:.0f}"),
            ("tokens seen", "tokens_M", "{:.1f}M"),
            ("startup (total - training)", "startup_s", "{:.1f} s"),
            ("peak GPU memory", "peak_vram_mb", "{:,.0f} MiB")]
    runs = f" (mean of {len(kars)} and {len(gpts)} runs)" if len(gpts) + len(kars) > 2 else ""
    print(f"| {runs.strip()} | karpathy `train.py` (SDPA/cuDNN, full causal) | examples/gpt |")
    print("|---|---|---|")
    for label, key, fmt in rows:
        print(f"| {label} | {fmt.format(mean(kars, key))} | {fmt.format(mean(gpts, key))} |")
    for name, recs in (("karpathy", kars), ("examples/gpt", gpts)):
        caches = sorted({r.get("cache", "empty") for r in recs})
        print(f"{name}'s compile cache at its start: {', '.join(caches)}")
        if len(recs) > 1:
            print(f"{name}'s val_bpb by run: "
                  + ", ".join(f"{r['val_bpb']:.6f}" for r in recs))
    order = sorted([(r.get("started", ""), "g") for r in gpts]
                   + [(r.get("started", ""), "k") for r in kars])
    print()
    g_bpb, k_bpb = mean(gpts, "val_bpb"), mean(kars, "val_bpb")
    g_mfu, k_mfu = mean(gpts, "mfu_palm"), mean(kars, "mfu_palm")
    print(f"side-by-side 300s: examples/gpt val_bpb {g_bpb:.6f} mfu_palm {g_mfu:.2f}; "
          f"karpathy val_bpb {k_bpb:.6f} mfu_palm {k_mfu:.2f}")
    print(f"runs: examples/gpt {len(gpts)}, karpathy {len(kars)}, in the order they started: "
          f"{' '.join(p for _, p in order)} (g examples/gpt, k karpathy); interleaved: "
          f"{interleaved([p for _, p in order])}")
    ok = bool(g_bpb < k_bpb and g_mfu >= k_mfu)
    print(f"examples/gpt lower val_bpb: {g_bpb < k_bpb}; MFU (PaLM) at least karpathy's: "
          f"{g_mfu >= k_mfu}: {'PASS' if ok else 'FAIL'}")
    return ok


def interleaved(order: list[str]) -> bool:
    """Whether no program ran twice in a row (g k g k, or k g k g)."""
    return all(a != b for a, b in itertools.pairwise(order))


def round_plan(done: list[str], runs: int) -> list[str]:
    """The runs still to do, in order: ``g1 k1 g2 k2 ...`` (g examples/gpt, k karpathy)
    less the ``done`` ones (the file stems of the records in the folder)."""
    plan = [f"{p}{i}" for i in range(1, runs + 1) for p in ("g", "k")]
    return [name for name in plan if name not in done]


def rounds(folder: Path, karpathy: Path, gpt_train: Path | None, runs: int, seconds: float,
           knobs: dict[str, str], run_s: float = RUN_S) -> int:
    """The next runs of the interleaved plan that fit in ``seconds``; the table once all
    are recorded. Exit 0 when all are (and the table says PASS), 3 when runs remain."""
    start = time.monotonic()
    folder.mkdir(parents=True, exist_ok=True)
    while True:
        todo = round_plan(sorted(p.stem for p in folder.glob("*.json")), runs)
        if not todo:
            break
        left = seconds - (time.monotonic() - start)
        if left < run_s:
            print(f"rounds: {len(todo)} run(s) left ({' '.join(todo)}); {left:.0f} s of this "
                  f"call left, under the {run_s:.0f} s a run takes: call again")
            return 3
        name = todo[0]
        t0 = time.monotonic()
        if name.startswith("g"):
            run("gpt", gpt_train, knobs, folder / f"{name}.json")
        else:
            run("karpathy", karpathy, {}, folder / f"{name}.json")
        run_s = max(run_s, time.monotonic() - t0)
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    return 0 if table([r for r in records if r["program"] == "gpt"],
                      [r for r in records if r["program"] == "karpathy"]) else 1


def parse_knobs(items: list[str]) -> dict[str, str]:
    knobs: dict[str, str] = {}
    for item in items:
        m = KNOB.match(item)
        if m is None:
            raise SystemExit(f"--set {item!r}: expected NAME=VALUE")
        knobs[m.group(1)] = m.group(2)
    return knobs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="one program, 300 s, empty compile cache unless --cache")
    r.add_argument("program", choices=["gpt", "karpathy"])
    r.add_argument("--train", type=Path,
                   help="karpathy's train.py (run karpathy), or a train.py to run as "
                        "examples/gpt's (run gpt; default: the committed one)")
    r.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a knob of examples/gpt's train.py (run gpt)")
    r.add_argument("--out", type=Path, required=True, help="the record, JSON")
    r.add_argument("--cache", type=Path, help="a compile cache to start from (a copy of it)")
    o = sub.add_parser("rounds", help="runs of both programs, interleaved, over calls")
    o.add_argument("folder", type=Path, help="the records (g1.json, k1.json, g2.json, ...)")
    o.add_argument("--karpathy", type=Path, required=True, help="karpathy's train.py")
    o.add_argument("--gpt-train", type=Path, help="a train.py to run as examples/gpt's")
    o.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a knob of examples/gpt's train.py")
    o.add_argument("--runs", type=int, default=2, help="runs of each program (default 2)")
    o.add_argument("--seconds", type=float, default=540.0,
                   help="this call's time: no run starts that would not end in it")
    t = sub.add_parser("table", help="both programs side by side, the means of their records")
    t.add_argument("records", type=Path, nargs="+", help="records of both programs")
    a = ap.parse_args(argv)
    if a.cmd == "run":
        run(a.program, a.train, parse_knobs(a.set), a.out, a.cache)
        return 0
    if a.cmd == "rounds":
        if not a.karpathy.is_file():
            raise SystemExit(f"--karpathy {a.karpathy}: no such file")
        if a.runs < 1:
            raise SystemExit(f"--runs {a.runs}: at least 1")
        return rounds(a.folder, a.karpathy, a.gpt_train, a.runs, a.seconds,
                      parse_knobs(a.set))
    records = [json.loads(p.read_text()) for p in a.records]
    return 0 if table([r for r in records if r["program"] == "gpt"],
                      [r for r in records if r["program"] == "karpathy"]) else 1


if __name__ == "__main__":
    sys.exit(main())
