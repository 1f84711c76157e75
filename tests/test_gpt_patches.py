"""examples/gpt/patches: each candidate patch applies with `git apply` to the committed
train.py, touches nothing else, and the patched program runs the tiny preset on the CPU
to a finite val_bpb with the printed contract (a GPU-only path saying that it is off)."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gpt"
PATCHES = EXAMPLE / "patches"
CONTRACT = ("val_bpb", "mfu_percent", "total_tokens_M", "num_steps", "peak_vram_mb",
            "training_seconds", "total_seconds", "tokens_per_second", "recompiles")
# the line each patched program prints about its change, on the CPU
SAYS = {
    "unet_skips": r"^unet skips: 1 \(encoder block i feeds decoder block 1 - i\)$",
    "fp8_head": r"^fp8 head: off \(no float8 matmul on the cpu\); the output layer runs in "
                r"fp32 as without the patch$",
    "batch_warmup": r"^batch warm-up: 1024 tokens a step \(1 x 8 x 128\) for the first 10% "
                    r"of the budget$",
    "smear_gate": r"^smear gate: on \(12 channels gate the previous token's embedding\)$",
}


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(GPT_CACHE_DIR=str(cache), GPT_PRESET="tiny", PYTHONUNBUFFERED="1",
               OMP_NUM_THREADS="1", **extra)
    src = str(EXAMPLE.parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _patched(name: str, into: Path) -> Path:
    """A copy of examples/gpt's two scripts with the patch applied by `git apply`."""
    for f in ("prepare.py", "train.py"):
        shutil.copy(EXAMPLE / f, into / f)
    proc = subprocess.run(["git", "apply", "-p3", str(PATCHES / f"{name}.patch")], cwd=into,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return into


@pytest.fixture(scope="module")
def tiny_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("gptcache")
    proc = subprocess.run([sys.executable, "prepare.py"], cwd=EXAMPLE, env=_env(cache),
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return cache


def test_every_patch_is_listed_and_touches_train_py_only() -> None:
    assert {p.stem for p in PATCHES.glob("*.patch")} == set(SAYS)
    for name in SAYS:
        text = (PATCHES / f"{name}.patch").read_text()
        assert text.startswith("# "), f"{name}.patch has no header comment"
        header = text.split("\n--- ", 1)[0]
        assert "From:" in header and "Expect:" in header
        targets = re.findall(r"^\+\+\+ (\S+)", text, re.MULTILINE)
        assert targets == ["b/examples/gpt/train.py"], targets
        check = subprocess.run(["git", "apply", "--check", str(PATCHES / f"{name}.patch")],
                               cwd=EXAMPLE.parents[1], capture_output=True, text=True,
                               check=False)
        assert check.returncode == 0, check.stderr


@pytest.mark.parametrize("name", sorted(SAYS))
def test_patched_tiny_run_keeps_the_contract(name: str, tiny_cache: Path,
                                             tmp_path: Path) -> None:
    work = _patched(name, tmp_path)
    assert (work / "train.py").read_text() != (EXAMPLE / "train.py").read_text()
    assert (work / "prepare.py").read_bytes() == (EXAMPLE / "prepare.py").read_bytes()
    proc = subprocess.run([sys.executable, "train.py"], cwd=work,
                          env=_env(tiny_cache, GPT_TIME_BUDGET="2"), capture_output=True,
                          text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(SAYS[name], out, re.MULTILINE), out[:2000]
    from assay.bench.metrics import parse_summary_block

    readings = parse_summary_block(out)
    for key in CONTRACT:
        assert key in readings, f"{key} missing from the summary"
    bpb = float(readings["val_bpb"][0].raw)
    assert math.isfinite(bpb) and 0.5 < bpb < 12
    assert float(readings["training_seconds"][0].raw) >= 2.0
    assert float(readings["tokens_per_second"][0].raw) > 0
    assert readings["recompiles"][0].raw == "0"


def test_batch_warmup_counts_the_tokens_it_trains(tiny_cache: Path, tmp_path: Path) -> None:
    # the half-size steps are counted as half: tokens/s counts the tokens read
    work = _patched("batch_warmup", tmp_path)
    train = work / "train.py"
    train.write_text(train.read_text().replace("BATCH_WARMUP_FRAC = 0.1 ",
                                               "BATCH_WARMUP_FRAC = 0.5 "))
    proc = subprocess.run([sys.executable, "train.py"], cwd=work,
                          env=_env(tiny_cache, GPT_TIME_BUDGET="2"), capture_output=True,
                          text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    vals = dict(line.split(": ", 1) for line in proc.stdout.rsplit("\n---\n", 1)[1]
                .splitlines() if ": " in line)
    steps = int(vals["num_steps"])
    seen = round(float(vals["total_tokens_M"]) * 1e6)  # every batch read, the untimed too
    assert seen < 2048 * steps  # some steps were half-size (1024 tokens), step 0 at least
    # with COMPILE none the one untimed step is step 0, a half-size one: the timed tokens
    # (tokens/s x training seconds) are the tokens read after it
    timed = float(vals["tokens_per_second"]) * float(vals["training_seconds"])
    assert timed == pytest.approx(seen - 1024, rel=1e-3)


def test_fp8_linear_matches_the_plain_product(tmp_path: Path) -> None:
    # torch._scaled_mm runs on this CPU, so the GPU path's arithmetic is checked here
    work = _patched("fp8_head", tmp_path)
    sys.path.insert(0, str(work))
    try:
        spec_train = _load(work / "train.py")
    finally:
        sys.path.remove(str(work))
        sys.modules.pop("prepare", None)
    try:
        probe = torch._scaled_mm(torch.zeros(16, 16, dtype=torch.float8_e4m3fn),
                                 torch.zeros(16, 16, dtype=torch.float8_e4m3fn).t(),
                                 scale_a=torch.ones(()), scale_b=torch.ones(()),
                                 out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError) as exc:
        pytest.fail(f"this torch has no CPU float8 matmul to check against: {exc}")
    assert probe.shape == (16, 16)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 32, generator=gen).bfloat16().requires_grad_()
    w = torch.randn(48, 32, generator=gen).requires_grad_()
    y = spec_train.FP8Linear.apply(x, w)
    ref = x.float() @ w.t()
    assert y.dtype == torch.bfloat16 and y.shape == (64, 48)
    assert (y.float() - ref).norm() / ref.norm() < 0.08
    upstream = torch.randn(64, 48, generator=gen)
    (y.float() * upstream).sum().backward()
    assert w.grad is not None and x.grad is not None
    assert w.grad.dtype == torch.float32 and x.grad.dtype == torch.bfloat16
    gw, gx = upstream.t() @ x.float(), upstream @ w.detach()
    assert (w.grad - gw).norm() / gw.norm() < 0.02  # bf16
    assert (x.grad.float() - gx).norm() / gx.norm() < 0.15  # e5m2 gradient


def _load(path: Path) -> ModuleType:
    import importlib.util

    spec = importlib.util.spec_from_file_location("patched_train", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
