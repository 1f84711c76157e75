"""examples/gpt/patches: the queue of candidate changes to train.py. Each patch applies
alone with `git apply` to the committed train.py (paths relative to examples/gpt, as the
`queue` proposer applies them in a copy of it), touches train.py only and never the
fidelity parameter TIME_BUDGET, and has a header the queue reads (a hypothesis, sources)
saying what it changes, where it comes from and what to expect at 30 s and at 300 s.
A patch that only sets knobs is the same file as assay's own assignment of those values;
every other patch runs the tiny preset on the CPU to a finite val_bpb with the printed
contract (a GPU-only path saying that it is off)."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from assay.bench.metrics import parse_summary_block
from assay.proposers.queue import QueueProposer, read_patch_file
from assay.repo.merge import merge_onto
from assay.repo.workspace import rewrite_assignment

torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gpt"
PATCHES = EXAMPLE / "patches"
CONTRACT = ("val_bpb", "mfu_percent", "total_tokens_M", "num_steps", "peak_vram_mb",
            "training_seconds", "total_seconds", "tokens_per_second", "recompiles")
# the patches that change code, and the line each patched program prints about its change
# on the CPU (tiny preset: 2 blocks of width 64, heads of 32, 128-token sequences)
SAYS = {
    "01_batch_warmup": r"^batch warm-up: 1024 tokens a step \(1 x 8 x 128\) for the first "
                       r"10% of the budget$",
    "02_smear_gate": r"^smear gate: on \(12 channels gate the previous token's embedding\)$",
    "03_attn_gate": r"^attention gate: on \(32 channels gate each of 2 heads\)$",
    "06_unet_skips": r"^unet skips: 1 \(encoder block i feeds decoder block 1 - i\)$",
    "07_seq_len_warmup": r"^sequence warm-up: 32, then 64 tokens a sequence for the first 20% "
                         r"of the budget, the same tokens a step$",
    "04_polar_express": r"^muon: polar express, 5 iterations$",
    "12_fp8_head": r"^fp8 head: off \(no float8 matmul on the cpu\); the output layer runs in "
                   r"fp32 as without the patch$",
}
# the patches that only set knobs, and the values they set
KNOBS: dict[str, dict[str, int | float]] = {
    "05_matrix_lr_006": {"MATRIX_LR": 0.06},
    "08_model_dim_768": {"MODEL_DIM": 768},
    "09_depth_10": {"DEPTH": 10},
    "10_warmdown_07": {"WARMDOWN_FRAC": 0.7},
    "11_embed_lr_09": {"EMBED_LR": 0.9},
}
FIDELITY = "TIME_BUDGET"
# pairs that change the same lines: the second conflicts once the first is kept (adjacent
# knob lines; two schedules of the first steps that rewrite the same loop)
CONFLICTS = {frozenset({"01_batch_warmup", "07_seq_len_warmup"}),
             frozenset({"05_matrix_lr_006", "11_embed_lr_09"}),
             frozenset({"08_model_dim_768", "09_depth_10"})}


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
    proc = subprocess.run(["git", "apply", str(PATCHES / f"{name}.patch")], cwd=into,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return into


def _tiny_run(work: Path, cache: Path, **extra: str) -> dict[str, str]:
    """The summary of the tiny preset's run of ``work``'s train.py (its output on failure)."""
    proc = subprocess.run([sys.executable, "train.py"], cwd=work,
                          env=_env(cache, GPT_TIME_BUDGET="2", **extra), capture_output=True,
                          text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    readings = parse_summary_block(proc.stdout)
    for key in CONTRACT:
        assert key in readings, f"{key} missing from the summary"
    out = {key: r[0].raw for key, r in readings.items()}
    out["_stdout"] = proc.stdout
    return out


@pytest.fixture(scope="module")
def tiny_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("gptcache")
    proc = subprocess.run([sys.executable, "prepare.py"], cwd=EXAMPLE, env=_env(cache),
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return cache


def test_every_patch_is_listed_applies_alone_and_touches_train_py_only() -> None:
    files = QueueProposer.collect(PATCHES)
    assert [p.stem for p in files] == sorted(SAYS | KNOBS)  # the queue's order: by name
    for path in files:
        text = path.read_text()
        assert text.startswith("# hypothesis: "), f"{path.name} has no hypothesis line"
        hypothesis, diff, sources = read_patch_file(path)
        assert hypothesis != path.stem and sources, path.name
        header = text.split("\ndiff --git ", 1)[0]
        assert "From:" in header and "Expect:" in header, path.name
        assert "30 s" in header and "300 s" in header, path.name
        targets = re.findall(r"^\+\+\+ (\S+)", diff, re.MULTILINE)
        assert targets == ["b/train.py"], targets
        changed = re.findall(r"^[-+](\w+) =", diff, re.MULTILINE)
        assert FIDELITY not in changed, f"{path.name} sets the fidelity parameter"
        # from the repository root, as the README says, and in a copy of examples/gpt
        check = subprocess.run(["git", "apply", "--check", "--directory=examples/gpt",
                                str(path)], cwd=EXAMPLE.parents[1], capture_output=True,
                               text=True, check=False)
        assert check.returncode == 0, f"{path.name}: {check.stderr}"


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_each_patch_goes_on_after_any_other_is_kept(tmp_path: Path) -> None:
    # the queue proposes each patch against the incumbent of its time: after a keep, git's
    # three-way merge (assay's merge_onto, from the patch's `index` line) must carry it over
    # the kept change unless the two change the same lines
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy(EXAMPLE / "train.py", root / "train.py")
    ident = ["-c", "user.name=t", "-c", "user.email=t@t"]
    _git(root, "init", "-q")
    _git(root, "add", "train.py")
    _git(root, *ident, "commit", "-qm", "base")
    base = _git(root, "rev-parse", "HEAD")
    files = QueueProposer.collect(PATCHES)
    conflicts = set()
    for kept in files:
        _git(root, "checkout", "-q", base)
        _git(root, "apply", "--index", str(kept))
        _git(root, *ident, "commit", "-qm", kept.stem)
        onto = _git(root, "rev-parse", "HEAD")
        for other in files:
            if other != kept:
                merged = merge_onto(root, read_patch_file(other)[1], onto)
                if merged is not None and merged.conflicts:
                    conflicts.add(frozenset({kept.stem, other.stem}))
    assert conflicts == CONFLICTS


@pytest.mark.parametrize("name", sorted(KNOBS))
def test_a_knob_patch_is_assays_own_assignment(name: str, tmp_path: Path) -> None:
    # the patch and `apply = "assign"` of the same values give the same file, so the knob
    # candidates run as the parameter sessions' candidates did
    patched = (_patched(name, tmp_path) / "train.py").read_text()
    expected = (EXAMPLE / "train.py").read_text()
    for knob, value in KNOBS[name].items():
        assert rewrite_assignment(expected, knob, value, "train.py") != expected
        expected = rewrite_assignment(expected, knob, value, "train.py")
    assert patched == expected


@pytest.mark.slow
@pytest.mark.parametrize("name", [*sorted(SAYS), "05_matrix_lr_006"])
def test_patched_tiny_run_keeps_the_contract(name: str, tiny_cache: Path,
                                             tmp_path: Path) -> None:
    work = _patched(name, tmp_path)
    assert (work / "train.py").read_text() != (EXAMPLE / "train.py").read_text()
    assert (work / "prepare.py").read_bytes() == (EXAMPLE / "prepare.py").read_bytes()
    vals = _tiny_run(work, tiny_cache)
    if name in SAYS:
        assert re.search(SAYS[name], vals["_stdout"], re.MULTILINE), vals["_stdout"][:2000]
    bpb = float(vals["val_bpb"])
    assert math.isfinite(bpb) and 0.5 < bpb < 12
    assert float(vals["training_seconds"]) >= 2.0
    assert float(vals["tokens_per_second"]) > 0
    assert vals["recompiles"] == "0"


def test_batch_warmup_counts_the_tokens_it_trains(tiny_cache: Path, tmp_path: Path) -> None:
    # the half-size steps are counted as half: tokens/s counts the tokens read
    work = _patched("01_batch_warmup", tmp_path)
    train = work / "train.py"
    train.write_text(train.read_text().replace("BATCH_WARMUP_FRAC = 0.1 ",
                                               "BATCH_WARMUP_FRAC = 0.5 "))
    vals = _tiny_run(work, tiny_cache)
    steps = int(vals["num_steps"])
    seen = round(float(vals["total_tokens_M"]) * 1e6)  # every batch read, the untimed too
    assert seen < 2048 * steps  # some steps were half-size (1024 tokens), step 0 at least
    # with COMPILE none the one untimed step is step 0, a half-size one: the timed tokens
    # (tokens/s x training seconds) are the tokens read after it
    timed = float(vals["tokens_per_second"]) * float(vals["training_seconds"])
    assert timed == pytest.approx(seen - 1024, rel=1e-3)


def test_seq_len_warmup_cuts_rows_and_keeps_the_tokens(tiny_cache: Path,
                                                       tmp_path: Path) -> None:
    work = _patched("07_seq_len_warmup", tmp_path)
    train = _load(work / "train.py")
    assert [train.seq_split(p) for p in (0.0, 0.09, 0.1, 0.19, 0.2, 0.9)] == [4, 4, 2, 2, 1, 1]
    # the whole run on short sequences: the same tokens a step, and a different model
    # than the one trained on whole rows (the attention saw less)
    path = work / "train.py"
    path.write_text(path.read_text().replace("SEQ_WARMUP_FRAC = 0.2 ", "SEQ_WARMUP_FRAC = 2.0 "))
    short = _tiny_run(work, tiny_cache)
    steps = int(short["num_steps"])
    assert round(float(short["total_tokens_M"]) * 1e6) == 2048 * steps
    timed = float(short["tokens_per_second"]) * float(short["training_seconds"])
    assert timed == pytest.approx(2048 * (steps - 1), rel=1e-3)


@pytest.mark.parametrize("name", ["02_smear_gate", "03_attn_gate", "06_unet_skips"])
def test_a_gated_patch_starts_as_the_unpatched_model(name: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # their new weights start at zero: at step 0 the patched model computes what the
    # committed one does, so a candidate can only drift from the incumbent by training
    monkeypatch.setenv("GPT_PRESET", "tiny")
    base, patched = _load(EXAMPLE / "train.py"), _load(_patched(name, tmp_path) / "train.py")
    torch.manual_seed(0)
    ref = base.GPT(96, 64, 4, 32, 16)
    ref.init_weights()
    with torch.no_grad():  # off the initialisation's zeros: a model that has trained a while
        for p in ref.parameters():
            p.add_(0.2 * torch.randn_like(p))
    new = patched.GPT(96, 64, 4, 32, 16)
    new.init_weights()
    missing, unexpected = new.load_state_dict(ref.state_dict(), strict=False)
    assert missing and not unexpected  # the patch's own weights, kept at their start
    idx = torch.randint(0, 96, (3, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(new(idx), ref(idx), atol=1e-6)
        # and they are used: moved off zero, the output changes
        for key in missing:
            new.get_parameter(key).add_(0.5)
        assert not torch.allclose(new(idx), ref(idx), atol=1e-3)


def test_polar_express_is_closer_to_orthogonal(tmp_path: Path) -> None:
    base, patched = _load(EXAMPLE / "train.py"), _load(_patched("04_polar_express", tmp_path)
                                                       / "train.py")
    gen = torch.Generator().manual_seed(0)
    for shape in [(256, 256), (512, 128), (2, 96, 256)]:
        u, _, v = torch.linalg.svd(torch.randn(*shape, generator=gen), full_matrices=False)
        s = torch.logspace(-3, 0, u.size(-1))  # singular values from 1e-3 to 1
        g = u @ torch.diag_embed(s.expand(*u.shape[:-2], -1)) @ v
        old = torch.linalg.svdvals(base.zeropower(g).float())
        new = torch.linalg.svdvals(patched.zeropower(g).float())
        assert new.max() < 1.3 and new.min() > 0
        assert (new - 1).abs().median() < 0.7 * (old - 1).abs().median(), (shape, old, new)


def test_fp8_linear_matches_the_plain_product(tmp_path: Path) -> None:
    # torch._scaled_mm runs on this CPU, so the GPU path's arithmetic is checked here
    spec_train = _load(_patched("12_fp8_head", tmp_path) / "train.py")
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
    """``path`` (a train.py) as a module of its own, its folder's prepare.py imported."""
    spec = importlib.util.spec_from_file_location("patched_train", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
        sys.modules.pop("prepare", None)
    return module
