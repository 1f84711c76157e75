"""``python -m assay.research.measure [--measure] [--gpu] [--json]``: this machine's peaks.

Prints the measured memory bandwidth and arithmetic rates (:mod:`.peaks`, cached per
machine; ``--measure`` measures again) beside the hardware table's vendor figures.
"""

from __future__ import annotations

import argparse
import json
import sys

from .. import hardware
from .peaks import measured


def main(argv: list[str] | None = None) -> int:
    """``python -m assay.research.measure [--measure] [--gpu] [--json]``: this machine's peaks
    against the hardware table's vendor figures."""
    ap = argparse.ArgumentParser(prog="python -m assay.research.measure",
                                 description=main.__doc__)
    ap.add_argument("--measure", action="store_true", help="measure now (not the cache)")
    ap.add_argument("--gpu", action="store_true", help="the first CUDA GPU, not the CPU")
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--quick", action="store_true", help="small buffers (a smoke test)")
    args = ap.parse_args(argv)
    kind = "gpu" if args.gpu else "cpu"
    got = measured(kind, refresh=args.measure, quick=args.quick)
    if got is None:
        print(f"no {kind} to measure (a CUDA GPU needs torch with CUDA)", file=sys.stderr)
        return 2
    devs = hardware.detect_gpus() if kind == "gpu" else [hardware.detect_cpu()]
    chip = devs[0].chip if devs else None
    vendor_bw = chip.bandwidth if chip else None
    vendor_flops: dict[str, float] = dict(chip.flops) if chip else {}
    vendor = {"chip": chip.name if chip else None, "bandwidth": vendor_bw,
              "flops": vendor_flops}
    if args.json:
        print(json.dumps({**got.to_json(), "vendor": vendor}, indent=1))
        return 0
    print(got.summary())
    for what, m in [("bandwidth", got.bandwidth), *got.flops.items()]:
        if m is None:
            continue
        ref = vendor_bw if what == "bandwidth" else vendor_flops.get(what)
        unit = "GB/s" if what == "bandwidth" else "GFLOP/s"
        tail = f"  vendor {ref / 1e9:.4g} {unit} ({m.value / ref:.0%})" if ref else \
            "  vendor figure unknown"
        print(f"  {what:9s} {m.value / 1e9:10.4g} {unit}  spread {m.spread:.1%}{tail}")
        print(f"            {m.method}")
    for note in got.notes:
        print(f"  note: {note}")
    return 0




if __name__ == "__main__":
    raise SystemExit(main())
