"""Scripted benchmark values: metrics that do not depend on the machine's speed or load.

Benchmarks in tests still do their real work (so runs take time and can be killed), but the
number they print is computed from what the code does (its size parameter), times a small
jitter drawn from a seeded sequence. The jitter keeps the pairs' spread non-zero, as a real
benchmark's would be, and is bounded (:data:`JITTER` = ±0.5%) far below every effect the
tests ask a decision about, so a decision comes out the same on a quiet or a busy machine.

:data:`DRAW` is Python source to paste into a benchmark script; it defines ``draw()``, which
returns the next factor of the sequence. The sequence's counter lives in the target's
``.assay`` folder (found from the working directory), shared by every slot; a slot pinned
to a GPU (``CUDA_VISIBLE_DEVICES``) has a sequence of its own, so what each GPU's slot
measures does not depend on how blocks happen to interleave between them. A sandboxed run
sees no ``.assay`` (its writes there vanish with the run): it seeds the jitter with its
run's id (``ASSAY_RUN_ID``, the same in every repeat of a test), else its process token,
still bounded by :data:`JITTER`.
"""

from __future__ import annotations

JITTER = 0.005

DRAW = f'''
def draw():
    import fcntl, os, pathlib, random
    parts = pathlib.Path.cwd().parts
    if ".assay" in parts:
        state = pathlib.Path(*parts[:parts.index(".assay") + 1])
    else:
        state = pathlib.Path.cwd() / ".assay"
    state.mkdir(exist_ok=True)
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    with open(state / ("bench-sequence" + ("-gpu" + gpu if gpu else "")), "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        n = len(fh.read())
        fh.write(".")
    if n == 0 and os.environ.get("ASSAY_PROC_TOKEN"):  # a sandbox: .assay is not shared
        n = os.environ.get("ASSAY_RUN_ID") or os.environ["ASSAY_PROC_TOKEN"]
    return 1.0 + random.Random(n).uniform(-{JITTER}, {JITTER})
'''
