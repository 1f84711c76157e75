"""The llama.cpp study on a real build, a real model file and llama-bench.

Everything heavy lives in a cache outside the repository (``~/.cache/assay/llamacpp/``,
``--cache DIR``), never committed:

- ``sdist/``: the ``llama-cpp-python`` and ``ik-llama-cpp-python`` sdists
  (``pip download --no-deps --no-binary :all:``);
- ``llama.cpp/``: the first's vendored llama.cpp, made a git repository (the target);
  ``ik_llama.cpp/``: the fork's source, unpacked for reading;
- ``build/``: its CMake build (static, so each candidate's programs can be copied out);
- ``models/``: a random-weight llama GGUF shaped like TinyLlama 1.1B (grouped-query
  attention, SwiGLU), scaled small unless ``--full-size``, and its Q4_0 quantization made
  by llama.cpp's own ``llama-quantize``;
- ``bins/NAME/``: the programs built from each candidate (``incumbent`` is the clean tree);
- ``truth/``: ``--truth`` results, keyed by llama.cpp version, model hash and machine.

Commands::

    python benchmarks/llamacpp_study.py prepare       # sources, build, model, one llama-bench
    python benchmarks/llamacpp_study.py candidates    # apply, build, check every patch
    python benchmarks/llamacpp_study.py build         # apply and build every patch, no checks
    python benchmarks/llamacpp_study.py compare NAME  # perplexity of NAME vs the incumbent
    python benchmarks/llamacpp_study.py --truth       # interleaved llama-bench pairs
    python benchmarks/llamacpp_study.py [run]         # assay research, run, finalize; report
    python benchmarks/llamacpp_study.py report        # the report again, from what run wrote

``run`` works in ``target/``, a clone of the prepared tree with the recipe, the model and the
queued patches committed, and keeps assay's outputs in ``run-logs/``; its report compares
each decision with the truth cached for the same llama-bench settings (``--threads``,
``--reps``), so pass the same ones to ``--truth`` and ``run``.

The candidates are the patch files in ``examples/llamacpp/patches/``. Every step runs at
the caller's niceness. The metric is llama-bench's tg128 (tokens/s); pp512 is recorded beside it.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from assay.bench.outputs import compare_outputs  # noqa: E402  (the repository's own package)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llamacpp_run  # noqa: E402  (the study's last step, beside this file)

RECIPE = ROOT / "examples" / "llamacpp" / "assay.toml"
PATCHES = ROOT / "examples" / "llamacpp" / "patches"
LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
IK_LLAMA_CPP_PYTHON = "ik-llama-cpp-python==0.1.5"
GGUF = "gguf==0.19.0"
# Every step runs at the caller's niceness (`nice -n 5 python benchmarks/llamacpp_study.py`
# on a shared machine): an extra `nice` on llama-bench lets every other process preempt the
# measurement, and one on the builds starves them on a loaded machine.
NICE: list[str] = []
TARGETS = ["llama-bench", "llama-quantize", "llama-simple", "llama-perplexity",
           "test-backend-ops"]
# This CPU has AMX and llama.cpp's AMX matmul segfaults on batches > 1 (llama.cpp #20824):
# native code without the AMX tile instructions keeps the repacked Q4_0 kernels.
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
# The fixed text the differential check computes perplexity on (the model's context is 128
# tokens; the text makes several chunks of byte-level tokens).
PPL_CTX = 128
PPL_TEXT = " ".join(
    f"In the year {1900 + i} the river rose by {i % 7} feet and the town of "
    f"{['Arden', 'Belmont', 'Corwin', 'Dalby'][i % 4]} built a wall of stone."
    for i in range(40))


class StudyError(Exception):
    """A step of the study failed: what, and what to do."""


@dataclass(frozen=True)
class Shape:
    """A llama model's hyperparameters."""

    layers: int
    width: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    context: int

    @property
    def tag(self) -> str:
        return f"l{self.layers}-d{self.width}-h{self.heads}-kv{self.kv_heads}-f{self.ffn}"


# TinyLlama 1.1B's own shapes, and the same architecture scaled so that one
# `llama-bench -p 512 -n 128 -r 3` takes seconds on two cores.
TINYLLAMA = Shape(layers=22, width=2048, heads=32, kv_heads=4, ffn=5632, vocab=32000,
                  context=2048)
SMALL = Shape(layers=8, width=512, heads=8, kv_heads=2, ffn=1408, vocab=32000, context=2048)


@dataclass(frozen=True)
class Study:
    """Where the study keeps its files, and how it builds and measures."""

    cache: Path
    jobs: int = 2  # parallel compilations
    threads: int = 2  # llama-bench -t
    reps: int = 3  # llama-bench -r

    @property
    def bench_args(self) -> list[str]:
        return ["-p", "512", "-n", "128", "-r", str(self.reps), "-fa", "1", "-t",
                str(self.threads), "-o", "json"]

    @property
    def sdist(self) -> Path:
        return self.cache / "sdist"

    @property
    def src(self) -> Path:
        return self.cache / "llama.cpp"

    @property
    def fork(self) -> Path:
        return self.cache / "ik_llama.cpp"

    @property
    def build(self) -> Path:
        return self.cache / "build"

    @property
    def target(self) -> Path:
        """The clone assay runs in (research, run, finalize)."""
        return self.cache / "target"

    @property
    def run_logs(self) -> Path:
        return self.cache / "run-logs"

    @property
    def pylib(self) -> Path:
        return self.cache / "pylib"

    def bins(self, name: str) -> Path:
        return self.cache / "bins" / name

    def model(self, shape: Shape, kind: str) -> Path:
        return self.cache / "models" / f"llama-{shape.tag}-{kind}.gguf"


def log(msg: str) -> None:
    print(msg, flush=True)


def run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
        heavy: bool = False, capture: bool = False) -> str:
    """Run ``cmd`` (under ``nice`` when heavy); its output when captured, else ''."""
    full = NICE + cmd if heavy else cmd
    r = subprocess.run(full, cwd=cwd, env=env, text=True,
                       stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.PIPE if capture else None, check=False)
    if r.returncode != 0:
        tail = (r.stderr or "")[-2000:] if capture else ""
        raise StudyError(f"`{' '.join(cmd)}` failed with exit code {r.returncode}"
                         f" (in {cwd or os.getcwd()}){': ' + tail if tail else ''}")
    return r.stdout if capture else ""


# --- sources ---------------------------------------------------------------------------

def download(p: Study, requirement: str) -> Path:
    """The sdist of ``requirement`` (``name==version``), downloaded once."""
    name, version = requirement.split("==")
    stem = f"{name.replace('-', '_')}-{version}"
    found = sorted(p.sdist.glob(f"{stem}.tar.gz"))
    if found:
        return found[0]
    p.sdist.mkdir(parents=True, exist_ok=True)
    log(f"downloading the {requirement} sdist")
    # the sdist of this package only: its build backend's own dependencies (pip installs
    # them to read the metadata) come as wheels, not built from source one by one
    run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", name,
         "-d", str(p.sdist), requirement], heavy=True)
    found = sorted(p.sdist.glob(f"{stem}.tar.gz"))
    if not found:
        raise StudyError(f"pip downloaded no {stem}.tar.gz into {p.sdist}")
    return found[0]


def unpack(archive: Path, inner: str, dest: Path) -> None:
    """Extract ``archive``'s ``TOP/inner`` folder as ``dest`` (once)."""
    if dest.exists():
        return
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    log(f"unpacking {archive.name}")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
    tops = [d for d in tmp.iterdir() if d.is_dir()]
    if len(tops) != 1 or not (tops[0] / inner).is_dir():
        raise StudyError(f"{archive} has no single top folder holding {inner}/")
    (tops[0] / inner).rename(dest)
    shutil.rmtree(tmp)


def git(repo: Path, *args: str, capture: bool = True) -> str:
    return run(["git", "-C", str(repo), *args], capture=capture)


def make_repository(src: Path) -> None:
    """Make the vendored tree a git repository with one commit: the incumbent."""
    dot_git = src / ".git"
    if (dot_git / "HEAD").is_file():
        return
    # The sdist keeps llama.cpp's submodule link (a `.git` file naming a folder it lacks).
    if dot_git.is_file():
        dot_git.unlink()
    shutil.rmtree(dot_git, ignore_errors=True)
    git(src, "init", "-q", "-b", "master")
    # The sdist's copy carries build products of its own packaging: keep them out.
    (src / ".git" / "info" / "exclude").write_text("build/\nbuild-*/\nmodels/*.gguf\n")
    git(src, "add", "-A")
    git(src, "-c", "user.name=study", "-c", "user.email=study@localhost", "commit", "-q",
        "-m", "llama.cpp as vendored by llama-cpp-python 0.3.36")


def llama_version(src: Path) -> str:
    """llama.cpp's version: the sdist's package version and ggml's version."""
    ggml = (src / "ggml" / "CMakeLists.txt").read_text()
    parts = {}
    for key in ("GGML_VERSION_MAJOR", "GGML_VERSION_MINOR", "GGML_VERSION_PATCH"):
        for line in ggml.splitlines():
            if line.strip().startswith(f"set({key}"):
                parts[key] = line.split()[1].rstrip(")")
    ggml_v = ".".join(parts.get(k, "?") for k in ("GGML_VERSION_MAJOR", "GGML_VERSION_MINOR",
                                                   "GGML_VERSION_PATCH"))
    return f"{LLAMA_CPP_PYTHON.split('==')[1]}+ggml-{ggml_v}"


def sources(p: Study) -> None:
    if not p.src.exists():
        unpack(download(p, LLAMA_CPP_PYTHON), "vendor/llama.cpp", p.src)
    make_repository(p.src)
    if not p.fork.exists():
        unpack(download(p, IK_LLAMA_CPP_PYTHON), "vendor/ik_llama.cpp", p.fork)
    log(f"llama.cpp {llama_version(p.src)} at {p.src}; ik_llama.cpp at {p.fork}")


# --- build -----------------------------------------------------------------------------

def build_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CCACHE_DIR", str(Path.home() / ".cache" / "ccache"))
    return env


def configure(p: Study, build: Path | None = None) -> None:
    build = build or p.build
    if (build / "CMakeCache.txt").exists():
        return
    if shutil.which("ccache") is None:
        log("ccache is not installed: every build compiles from scratch")
    run(["cmake", "-S", str(p.src), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
         "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=ON", "-DGGML_CCACHE=ON",
         "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=ON", "-DLLAMA_BUILD_TOOLS=ON",
         f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}"],
        env=build_env(), heavy=True, capture=True)


def compile_targets(p: Study) -> float:
    """Build the study's programs; the seconds it took."""
    configure(p)
    t0 = time.monotonic()
    run(["cmake", "--build", str(p.build), "-j", str(p.jobs), "--target", *TARGETS],
        env=build_env(), heavy=True, capture=True)
    return time.monotonic() - t0


def keep_programs(p: Study, name: str) -> Path:
    """Copy the freshly built programs to ``bins/NAME``."""
    dest = p.bins(name)
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for t in TARGETS:
        shutil.copy2(p.build / "bin" / t, dest / t)
    return dest


# --- the model -------------------------------------------------------------------------

def gguf_module(p: Study) -> Any:
    """The ``gguf`` package, installed into the cache once (it is not an assay dependency)."""
    if not (p.pylib / "gguf").is_dir():
        log(f"installing {GGUF} into {p.pylib}")
        # numpy and pyyaml, its only imports beyond the standard library, come from the
        # environment this script runs in
        run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
             str(p.pylib), GGUF], heavy=True)
    if str(p.pylib) not in sys.path:
        sys.path.append(str(p.pylib))  # after the venv's own numpy
    import gguf  # the optional third-party writer, only for this step

    return gguf


def vocabulary(gguf: Any, size: int) -> tuple[list[str], list[float], list[int]]:
    """A SentencePiece-style vocabulary: unk, bos, eos, 256 byte tokens, then pieces."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = ["\u2581"]
    for length in range(1, 5):  # every word of 1-4 letters, with and without the space mark
        for combo in itertools.product(letters, repeat=length):
            if len(tokens) + len(pieces) >= size:
                break
            pieces += [f"\u2581{''.join(combo)}", "".join(combo)]
    tokens += pieces[: size - len(tokens)]
    types += [gguf.TokenType.NORMAL] * (size - len(types))
    scores = [0.0] * 259 + [-float(k) for k in range(size - 259)]
    return tokens, scores, [int(t) for t in types]


def write_model(p: Study, shape: Shape, out: Path) -> None:
    """A llama GGUF with seeded random weights (f16 matrices, f32 norms)."""
    gguf = gguf_module(p)
    import numpy as np

    rng = np.random.default_rng(0)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_name(f"random llama {shape.tag}")
    w.add_context_length(shape.context)
    w.add_embedding_length(shape.width)
    w.add_block_count(shape.layers)
    w.add_feed_forward_length(shape.ffn)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_rope_dimension_count(shape.width // shape.heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    tokens, scores, types = vocabulary(gguf, shape.vocab)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    def matrix(rows: int, cols: int) -> Any:
        return (rng.standard_normal((rows, cols), dtype=np.float32)
                * (1.0 / math.sqrt(cols))).astype(np.float16)

    kv = shape.kv_heads * (shape.width // shape.heads)
    norm = np.ones(shape.width, dtype=np.float32)
    w.add_tensor("token_embd.weight", matrix(shape.vocab, shape.width))
    for i in range(shape.layers):
        b = f"blk.{i}"
        w.add_tensor(f"{b}.attn_norm.weight", norm)
        w.add_tensor(f"{b}.attn_q.weight", matrix(shape.width, shape.width))
        w.add_tensor(f"{b}.attn_k.weight", matrix(kv, shape.width))
        w.add_tensor(f"{b}.attn_v.weight", matrix(kv, shape.width))
        w.add_tensor(f"{b}.attn_output.weight", matrix(shape.width, shape.width))
        w.add_tensor(f"{b}.ffn_norm.weight", norm)
        w.add_tensor(f"{b}.ffn_gate.weight", matrix(shape.ffn, shape.width))
        w.add_tensor(f"{b}.ffn_up.weight", matrix(shape.ffn, shape.width))
        w.add_tensor(f"{b}.ffn_down.weight", matrix(shape.width, shape.ffn))
    w.add_tensor("output_norm.weight", norm)
    w.add_tensor("output.weight", matrix(shape.vocab, shape.width))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.rename(out)


def model(p: Study, shape: Shape) -> Path:
    """The Q4_0 model file (written and quantized once)."""
    q4 = p.model(shape, "q4_0")
    if q4.exists():
        return q4
    f16 = p.model(shape, "f16")
    if not f16.exists():
        log(f"writing {f16.name}")
        write_model(p, shape, f16)
    log(f"quantizing to {q4.name}")
    tmp = q4.with_name(q4.name + ".tmp")
    run([str(p.build / "bin" / "llama-quantize"), str(f16), str(tmp), "Q4_0", "2"],
        heavy=True, capture=True)
    tmp.rename(q4)
    return q4


def file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()[:16]


# --- llama-bench -----------------------------------------------------------------------

@dataclass(frozen=True)
class Bench:
    pp: float  # pp512 tokens/s
    tg: float  # tg128 tokens/s


def bench(p: Study, bins: Path, model_file: Path) -> Bench:
    """One ``llama-bench -p 512 -n 128 -r 3 -fa 1 -t 2``: its pp512 and tg128 means."""
    out = run([str(bins / "llama-bench"), "-m", str(model_file), *p.bench_args], heavy=True,
              capture=True)
    rows = json.loads(out)
    pp = [r["avg_ts"] for r in rows if r["n_prompt"] == 512 and r["n_gen"] == 0]
    tg = [r["avg_ts"] for r in rows if r["n_prompt"] == 0 and r["n_gen"] == 128]
    if len(pp) != 1 or len(tg) != 1:
        raise StudyError(f"llama-bench printed {len(rows)} tests, not one pp512 and one tg128")
    return Bench(pp=float(pp[0]), tg=float(tg[0]))


def prepare(p: Study, shape: Shape, measure: bool = True) -> Path:
    """Sources, the incumbent's build, the model; one llama-bench printed (``measure``)."""
    sources(p)
    if not (p.bins("incumbent") / "llama-bench").exists():
        git(p.src, "checkout", "-q", "--", ".")
        log("building the incumbent (cmake, ccache)")
        secs = compile_targets(p)
        log(f"built {', '.join(TARGETS)} in {secs:.0f} s")
        keep_programs(p, "incumbent")
    m = model(p, shape)
    log(f"model {m.name}: {m.stat().st_size / 2**20:.1f} MiB, sha256 {file_hash(m)}")
    if not measure:
        return m
    b = bench(p, p.bins("incumbent"), m)
    log(f"llama-bench {' '.join(p.bench_args)}: pp512 {b.pp:.1f} t/s, tg128 {b.tg:.1f} t/s")
    return m


# --- candidates ----------------------------------------------------------------------

@dataclass(frozen=True)
class Candidate:
    """A patch file and what its header says: the ops to check, whether it should pass."""

    name: str
    path: Path
    checks: tuple[tuple[str, str], ...]  # (op, params regex or '') for test-backend-ops
    expect: str  # "valid" or "invalid"


def read_candidate(path: Path) -> Candidate:
    checks: list[tuple[str, str]] = []
    expect = ""
    for line in path.read_text().splitlines():
        if line.startswith("diff --git"):
            break
        if line.startswith("# check:"):
            op, _, params = line.removeprefix("# check:").strip().partition(" ")
            checks.append((op, params.strip()))
        elif line.startswith("# expect:"):
            expect = line.removeprefix("# expect:").strip()
    if expect not in ("valid", "invalid") or not checks:
        raise StudyError(f"{path}: its header needs '# expect: valid|invalid' and at least one"
                         " '# check: OP [PARAMS]' line before the diff")
    return Candidate(path.stem, path, tuple(checks), expect)


def candidates(names: list[str]) -> list[Candidate]:
    found = {c.name: c for c in map(read_candidate, sorted(PATCHES.glob("*.patch")))}
    unknown = [n for n in names if n not in found]
    if unknown:
        raise StudyError(f"no patch named {', '.join(unknown)} in {PATCHES} "
                         f"(there are: {', '.join(found)})")
    return [found[n] for n in names] if names else list(found.values())


def backend_ops(bins: Path, op: str, params: str) -> tuple[bool, str]:
    """``test-backend-ops test -b CPU -o OP [-p PARAMS]``: passed, and its summary line."""
    cmd = [str(bins / "test-backend-ops"), "test", "-b", "CPU", "-o", op]
    if params:
        cmd += ["-p", params]
    r = subprocess.run(NICE + cmd, text=True, capture_output=True, check=False)
    lines = [ln.strip() for ln in r.stdout.splitlines() if "tests passed" in ln]
    return r.returncode == 0, (lines[-1] if lines else f"exit code {r.returncode}")


def perplexity(p: Study, bins: Path, model_file: Path, text: Path) -> str:
    """The per-chunk and final perplexities of ``model_file`` on the fixed text, flash
    attention on, computed twice: in whole 128-token micro-batches (the tiled
    flash-attention path and the Q4_0 GEMM run) and one token at a time (the batch-1
    decoding kernels run: the Q4_0 GEMV, the one-row flash attention)."""
    out = []
    for ubatch in (PPL_CTX, 1):
        for attempt in range(3):
            try:
                lines = perplexity_once(p, bins, model_file, text, ubatch)
                break
            except StudyError:
                if attempt == 2:
                    raise
        out += [f"ub{ubatch}: {ln}" for ln in lines.splitlines()]
    return "\n".join(out)


def perplexity_once(p: Study, bins: Path, model_file: Path, text: Path, ubatch: int) -> str:
    r = subprocess.run([*NICE, str(bins / "llama-perplexity"), "-m", str(model_file), "-f",
                        str(text), "-c", str(PPL_CTX), "-b", str(PPL_CTX), "-ub", str(ubatch),
                        "-t", str(p.threads), "-fa", "on", "--no-warmup"],
                       text=True, capture_output=True, check=False)
    if r.returncode != 0:
        raise StudyError(f"llama-perplexity in {bins} failed ({r.returncode}): "
                         f"{r.stderr[-1500:]}")
    out = r.stdout + r.stderr
    # llama-perplexity prints each chunk's value as it goes, so other log lines can land in
    # the middle of a line: take the values themselves, and the final estimate (a run
    # whose final line was cut by another is run again)
    chunks = re.findall(r"\[(\d+)\](\d+\.\d+)", out)
    final = re.findall(r"Final estimate: PPL = \S+ \+/- \S+", out)
    if not chunks or len(final) != 1:
        raise StudyError(f"llama-perplexity printed no perplexities: {out[-1500:]}")
    return "\n".join([",".join(f"[{i}]{v}" for i, v in chunks), final[0]])


def greedy(bins: Path, model_file: Path) -> str | None:
    """32 greedily generated tokens (llama-simple, its default threads), the text only;
    None when it takes more than two minutes (a busy machine)."""
    try:
        r = subprocess.run([*NICE, str(bins / "llama-simple"), "-m", str(model_file), "-n", "32",
                            "The capital of France is"], text=True, capture_output=True,
                           check=False, timeout=120)
    except subprocess.TimeoutExpired:
        return None
    if r.returncode != 0:
        raise StudyError(f"llama-simple in {bins} failed ({r.returncode}): {r.stderr[-1500:]}")
    return r.stdout.strip()


# Numbers in the perplexity output may differ by this much (relative). Measured on the
# study's random-weight model: patches that keep every operation's order give identical
# perplexities; the two-accumulator GEMV (reordered float sums) moves the one-token-at-a-time
# perplexities by 1.6e-3 (this model amplifies rounding); the wrong flash-attention fusion
# moves the 128-token ones by 0.23.
PPL_RTOL = 1e-2
DELTA = 0.01  # the recipe's [decision] delta: a keep's truth must lie above it


@dataclass(frozen=True)
class Comparison:
    same: bool
    why: str
    incumbent: str
    candidate: str


def compare(p: Study, name: str, model_file: Path) -> Comparison:
    """Perplexity of candidate ``name`` against the incumbent's, within ``PPL_RTOL``."""
    text = p.cache / "ppl-text.txt"
    text.write_text(PPL_TEXT + "\n")
    a = perplexity(p, p.bins("incumbent"), model_file, text)
    b = perplexity(p, p.bins(name), model_file, text)
    bad = compare_outputs(a, b, rtol=PPL_RTOL)
    return Comparison(not bad, "\n".join(m.describe() for m in bad), a, b)


def apply_patch(p: Study, c: Candidate) -> None:
    git(p.src, "checkout", "-q", "--", ".")
    r = subprocess.run(["git", "-C", str(p.src), "apply", "--check", str(c.path)],
                       text=True, capture_output=True, check=False)
    if r.returncode != 0:
        raise StudyError(f"{c.path.name} does not apply to llama.cpp {llama_version(p.src)}:"
                         f" {r.stderr.strip()}")
    git(p.src, "apply", str(c.path))


def try_candidate(p: Study, c: Candidate, model_file: Path) -> dict[str, Any]:
    """Apply ``c`` to a clean tree, build it, run its checks and the compare."""
    row: dict[str, Any] = {"name": c.name, "expect": c.expect}
    try:
        apply_patch(p, c)
        row["applied"] = True
        row["build_s"] = round(compile_targets(p), 1)
        keep_programs(p, c.name)
        row["compiled"] = True
    except StudyError as e:
        row["error"] = str(e)
        return row
    finally:
        git(p.src, "checkout", "-q", "--", ".")
    bins = p.bins(c.name)
    row["backend_ops"] = {}
    for op, params in c.checks:
        ok, summary = backend_ops(bins, op, params)
        row["backend_ops"][f"{op} {params}".strip()] = {"passed": ok, "summary": summary}
    cmp = compare(p, c.name, model_file)
    row["compare"] = {"same": cmp.same, "why": cmp.why}
    a, b = greedy(p.bins("incumbent"), model_file), greedy(bins, model_file)
    row["greedy_same"] = "timeout" if a is None or b is None else a == b
    row["valid"] = cmp.same and all(v["passed"] for v in row["backend_ops"].values())
    return row


def build_all(p: Study, chosen: list[Candidate]) -> None:
    """Each candidate's programs, built once (``bins/NAME``), without its checks: what
    ``--truth`` needs when the candidates were checked before."""
    for c in chosen:
        if (p.bins(c.name) / "llama-bench").exists():
            continue
        try:
            apply_patch(p, c)
            secs = compile_targets(p)
            keep_programs(p, c.name)
        finally:
            git(p.src, "checkout", "-q", "--", ".")
        log(f"{c.name}: built in {secs:.0f} s")


def check_all(p: Study, chosen: list[Candidate], model_file: Path) -> list[dict[str, Any]]:
    out = p.cache / "candidates.json"
    rows: list[dict[str, Any]] = json.loads(out.read_text()) if out.exists() else []
    for c in chosen:
        log(f"--- {c.name}")
        row = try_candidate(p, c, model_file)
        for k, v in row.items():
            log(f"  {k}: {v}")
        rows = [r for r in rows if r["name"] != c.name] + [row]
        out.write_text(json.dumps(rows, indent=1))
    log(f"results in {out}")
    return rows


# --- the truth -------------------------------------------------------------------------

def machine() -> str:
    cpu = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return f"{platform.node()}|{cpu}|{os.cpu_count()} cpus"


def truth_key(p: Study, model_file: Path) -> str:
    raw = f"{llama_version(p.src)}|{file_hash(model_file)}|{machine()}|{' '.join(p.bench_args)}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Effect:
    """A paired effect in percent (positive: the candidate is faster) and its interval."""

    mean: float
    low: float
    high: float
    n: int


def paired_effect(inc: list[float], cand: list[float], level: float = 0.90) -> Effect:
    """Mean of the pairs' log ratios with its two-sided t interval, as percent changes."""
    from scipy.stats import t as student_t  # the study's only use of scipy

    d = [math.log(b / a) for a, b in zip(inc, cand, strict=True)]
    n = len(d)
    m = statistics.fmean(d)
    half = (float(student_t.ppf(0.5 + level / 2, n - 1)) * statistics.stdev(d) / math.sqrt(n)
            if n > 1 else math.inf)

    def pct(x: float) -> float:
        return 100.0 * math.expm1(x)

    return Effect(pct(m), pct(m - half), pct(m + half), n)


def measure_pairs(p: Study, name: str, model_file: Path, pairs: int) -> dict[str, list[float]]:
    """``pairs`` interleaved llama-bench pairs, the order alternating (ABBA)."""
    v: dict[str, list[float]] = {"inc_pp": [], "inc_tg": [], "cand_pp": [], "cand_tg": [],
                                 "loads": []}
    for i in range(pairs):
        v["loads"].append(round(os.getloadavg()[0], 2))  # the 1-minute load, each pair
        order = ["inc", "cand"] if i % 2 == 0 else ["cand", "inc"]
        for side in order:
            b = bench(p, p.bins("incumbent" if side == "inc" else name), model_file)
            v[f"{side}_pp"].append(b.pp)
            v[f"{side}_tg"].append(b.tg)
    return v


def truth(p: Study, chosen: list[Candidate], model_file: Path, pairs: int) -> dict[str, Any]:
    """Each candidate against the incumbent, cached by version, model and machine."""
    key = truth_key(p, model_file)
    path = p.cache / "truth" / f"{key}.json"
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {
        "llama_cpp": llama_version(p.src), "model": model_file.name,
        "model_sha256": file_hash(model_file), "machine": machine(),
        "bench": " ".join(p.bench_args), "candidates": {}}
    for c in chosen:
        have = data["candidates"].get(c.name)
        if have and len(have["inc_tg"]) >= pairs:
            continue
        if not (p.bins(c.name) / "llama-bench").exists():
            log(f"{c.name}: not built (run the candidates command first); skipped")
            continue
        t0 = time.monotonic()
        load0 = os.getloadavg()[0]
        v = measure_pairs(p, c.name, model_file, pairs)
        v["seconds"] = [round(time.monotonic() - t0, 1)]
        v["load"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
        data["candidates"][c.name] = v
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1))
        log(f"{c.name}: {pairs} pairs in {v['seconds'][0]:.0f} s, load {v['load']}")
    return data


def truth_effects(data: dict[str, Any]) -> dict[str, tuple[Effect, Effect]]:
    """Each measured candidate's (tg128, pp512) effect."""
    return {name: (paired_effect(v["inc_tg"], v["cand_tg"]),
                   paired_effect(v["inc_pp"], v["cand_pp"]))
            for name, v in data["candidates"].items()}


def load_range(v: dict[str, Any]) -> str:
    """The 1-minute load average while the pairs ran: min-max (mean)."""
    loads = v.get("loads") or v.get("load") or []
    if not loads:
        return "-"
    return f"{min(loads):.1f}-{max(loads):.1f} ({statistics.fmean(loads):.1f})"


def truth_table(data: dict[str, Any]) -> str:
    rows = [f"llama.cpp {data['llama_cpp']}, {data['model']} ({data['model_sha256']}), "
            f"{data['machine']}, llama-bench {data['bench']}",
            f"{'candidate':<32}{'pairs':>6}{'tg128 %':>9}{'90% interval':>20}"
            f"{'pp512 %':>9}{'90% interval':>20}{'tg inc t/s':>12}{'pp inc t/s':>12}"
            f"{'s':>6}  load min-max (mean)"]
    effects = truth_effects(data)
    for name, v in data["candidates"].items():
        tg, pp = effects[name]
        rows.append(f"{name:<32}{tg.n:>6}{tg.mean:>+9.2f}{f'[{tg.low:+.2f}, {tg.high:+.2f}]':>20}"
                    f"{pp.mean:>+9.2f}{f'[{pp.low:+.2f}, {pp.high:+.2f}]':>20}"
                    f"{statistics.median(v['inc_tg']):>12.1f}"
                    f"{statistics.median(v['inc_pp']):>12.1f}"
                    f"{v['seconds'][0]:>6.0f}  {load_range(v)}")
    return "\n".join(rows)


def cached_truth(p: Study, model_file: Path) -> dict[str, Any] | None:
    path = p.cache / "truth" / f"{truth_key(p, model_file)}.json"
    return json.loads(path.read_text()) if path.exists() else None


# --- the run: research, assay run, finalize ---------------------------------------------

class LoadSampler:
    """The 1-minute load average, sampled every ``every`` seconds in a background thread."""

    def __init__(self, every: float = 15.0) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(every,), daemon=True)
        self._thread.start()

    def _loop(self, every: float) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self._stop.wait(every):
                return

    def stop(self) -> str:
        self._stop.set()
        self._thread.join()
        v = self.samples
        return (f"load min {min(v):.1f}, mean {statistics.fmean(v):.1f}, max {max(v):.1f}"
                f" over {len(v)} samples")


def truth_lookup(data: dict[str, Any] | None
                 ) -> tuple[dict[str, str], dict[str, float | None], dict[str, float | None]]:
    """Per candidate: the truth in words, its tg interval's low end and its tg mean
    (fractions)."""
    words: dict[str, str] = {}
    low: dict[str, float | None] = {}
    mean: dict[str, float | None] = {}
    for name, (tg, pp) in (truth_effects(data) if data else {}).items():
        words[name] = (f"tg {tg.mean:+.1f}% [{tg.low:+.1f}, {tg.high:+.1f}]; "
                       f"pp {pp.mean:+.1f}% [{pp.low:+.1f}, {pp.high:+.1f}] ({tg.n})")
        low[name], mean[name] = tg.low / 100, tg.mean / 100
    return words, low, mean


def run_seconds(marks: dict[str, Any]) -> tuple[float, bool]:
    """The seconds the run step ran, and whether pauses are left out: the sum of its
    stretches, unless a stretch from before they were kept is among them (then from its
    first start, pauses included)."""
    segments = marks.get("segments") or []
    if segments and not marks.get("earlier_unknown"):
        return float(sum(end - start for start, end in segments)), True
    return time.time() - float(marks["run"]), False


def study_run(p: Study, shape: Shape, m: Path, max_hours: float | None = None,
              resume: bool = False) -> int:
    """research -> run -> finalize on a fresh clone of the prepared tree (its committed
    incumbent: a candidate being built in the study's own tree does not reach it), then
    the report. ``resume``: go on with the clone, its research and its journal (`assay run`
    resumes an interrupted run); the times count from the first start."""
    sampler = LoadSampler()
    chosen = candidates([])
    logs = p.run_logs
    marks = logs / "started.json"
    tree = p.target
    if resume and (tree / ".assay").is_dir() and (logs / "research.json").exists():
        if not marks.exists():  # a run from before the marks were kept: now is the start
            marks.write_text(json.dumps({"study": time.time()}))
    else:
        shutil.rmtree(logs, ignore_errors=True)
        logs.mkdir(parents=True)
        marks.write_text(json.dumps({"study": time.time()}))
        recipe = llamacpp_run.recipe_text(RECIPE.read_text(), p.threads, p.reps,
                                          "1.1B q4_0" if shape == TINYLLAMA else "55M q4_0",
                                          p.jobs)
        tree = llamacpp_run.make_target(p.src, p.target, m, PPL_TEXT, recipe,
                                        [c.path for c in chosen], p.bins("incumbent"))
        log(f"=== assay research on {tree.name}: the prepared llama.cpp tree, the recipe, the "
            f"model; {time.strftime('%H:%M')}")
        llamacpp_run.research(tree, p.fork, logs / "research.json")
    started = json.loads(marks.read_text())
    if "run" in started and "segments" not in started:
        started["earlier_unknown"] = True  # a stretch from before they were kept
    started.setdefault("run", time.time())
    marks.write_text(json.dumps(started))
    log(f"=== assay run (queue proposer, the recipe's settings); {time.strftime('%H:%M')}")
    hours = ["--max-hours", f"{max_hours:g}"] if max_hours else []
    begun = time.time()
    try:
        llamacpp_run.assay(tree, "run", *hours, out=logs / "run.txt", timeout=4 * 3600)
    finally:  # each stretch the run step ran, so that a pause between them is not counted
        started.setdefault("segments", []).append([begun, time.time()])
        marks.write_text(json.dumps(started))
    run_s, net = run_seconds(started)
    log(f"=== assay finalize ([finalize.review]: ASan + UBSan); {time.strftime('%H:%M')}")
    llamacpp_run.assay(tree, "finalize", out=logs / "finalize.txt", timeout=3 * 3600,
                       ok_codes=(0, 1, 2))
    (logs / "times.json").write_text(json.dumps({
        "study_s": time.time() - started["study"], "run_s": run_s, "run_net": net,
        "load": sampler.stop(),
        "machine": machine()}))
    return report(p, m, chosen)


def report(p: Study, m: Path, chosen: list[Candidate]) -> int:
    """What the run step wrote, against the truth: per candidate, the totals, the final
    verification in the study's table form, and the summary line (PASS or FAIL)."""
    tree, logs = p.target, p.run_logs
    if not (logs / "times.json").exists():
        raise StudyError(f"no finished study run in {logs}: run the `run` command first")
    times = json.loads((logs / "times.json").read_text())
    data = json.loads((logs / "research.json").read_text())
    log("=== the research brief")
    for line in llamacpp_run.research_summary(data):
        log(line)
    hyps = data.get("hypotheses") or []
    for c in chosen:
        if c.expect == "valid":
            r = llamacpp_run.rank_in_brief(hyps, c.name)
            log(f"  {c.name}: {'not in the brief' if r is None else f'rank {r} of {len(hyps)}'}")
    run_out = (logs / "run.txt").read_text()
    log("=== assay run\n" + run_out.rstrip())
    log("=== assay finalize\n" + (logs / "finalize.txt").read_text().rstrip())
    prs = [x.read_text() for x in llamacpp_run.pr_texts(tree)]
    for text in prs[:1]:
        log("--- the first PR text\n" + text)
    found = llamacpp_run.rows(tree)
    truth_data = cached_truth(p, m)
    words, low, mean = truth_lookup(truth_data)
    log("=== per candidate (truth: --truth's paired effects in %, 90% intervals, pairs; assay: "
        "its decision, effect and 90% interval, pp512's median change, runs, build seconds "
        "of the first block and the largest later one (count), checks runs)")
    for line in llamacpp_run.candidate_table(found, lambda n: (words.get(n, "no truth"), None)):
        log(line)
    for row in found:
        log(f"  {row.exp} {row.name}: {row.reason[:300]}")
    span = ("the time it ran, pauses between stretches left out" if times.get("run_net")
            else "from its first start, pauses between stretches included")
    log(f"wall time: study {times['study_s'] / 60:.1f} min, assay run "
        f"{times['run_s'] / 60:.1f} min ({span}); {len(found) / (times['run_s'] / 3600):.1f} "
        "experiments per hour")
    verified = [ln for ln in run_out.splitlines() if ln.startswith(("verified", "verifying"))]
    log("final paired verification: " + ("; ".join(verified) if verified else
                                         "none (nothing was kept: the final best is the "
                                         "baseline)"))
    for line in llamacpp_run.study_table(llamacpp_run.verification_runs(tree)):
        log(line)
    log(f"machine: {times['machine']}; during the run step: {times['load']}")
    ok, why = llamacpp_run.verdict(found, low, mean,
                                   [c.name for c in chosen if c.expect == "invalid"],
                                   DELTA, prs)
    if truth_data is None:
        ok, why = False, ["no truth cached for this llama.cpp, model, machine and "
                          "llama-bench settings (run --truth first)", *why]
    for w in why:
        log(f"  not met: {w}")
    kept = sum(r.state == "kept" for r in found)
    if not kept:
        log("  nothing was kept: the conditions on keeps and on PR texts hold vacuously, and "
            "finalize had no change to make a PR text of")
    untried = [c.name for c in chosen if c.name not in {r.name for r in found}]
    if untried:
        ok = False
        log(f"  not met: the run did not reach {', '.join(untried)}")
    log(f"summary: {len(found)} experiments, {kept} kept, "
        f"{sum(r.state == 'invalid' for r in found)} invalid; {len(prs)} PR text(s): "
        f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("command", nargs="?", default="run",
                    help="run (the default: research, assay run, finalize, then the "
                         "report), report (again, from what run wrote), prepare, build "
                         "(each candidate's programs, no checks), candidates or compare")
    ap.add_argument("names", nargs="*", help="candidate patch names (default: all)")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "assay" / "llamacpp")
    ap.add_argument("--full-size", action="store_true", help="TinyLlama 1.1B's own shapes")
    ap.add_argument("--truth", action="store_true",
                    help="each candidate against the incumbent in interleaved pairs")
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=2, help="parallel compilations")
    ap.add_argument("--threads", type=int, default=2, help="llama-bench -t")
    ap.add_argument("--reps", type=int, default=3, help="llama-bench -r")
    ap.add_argument("--resume", action="store_true",
                    help="run: go on with the last run's checkout, research and journal")
    ap.add_argument("--max-hours", type=float, default=None,
                    help="run: `assay run --max-hours` (no block starts that it would cut)")
    args = ap.parse_args(argv)
    if args.command not in ("run", "report", "prepare", "build", "candidates", "compare"):
        # `--truth NAME ...`: the names alone, no command
        args.names.insert(0, args.command)
        args.command = "prepare"
    if args.truth and args.command == "run":
        args.command = "prepare"
    p = Study(args.cache.expanduser(), args.jobs, args.threads, args.reps)
    shape = TINYLLAMA if args.full_size else SMALL
    try:
        m = prepare(p, shape, measure=args.command == "prepare" and not args.truth)
        if args.command == "report":
            return report(p, m, candidates([]))
        if args.command == "run" and not args.truth:
            return study_run(p, shape, m, args.max_hours, args.resume)
        if args.command == "candidates":
            check_all(p, candidates(args.names), m)
        elif args.command == "build":
            build_all(p, candidates(args.names))
        elif args.command == "compare":
            for c in candidates(args.names):
                cmp = compare(p, c.name, m)
                log(f"{c.name}: {'same' if cmp.same else 'DIFFERENT'} within rtol={PPL_RTOL:g}"
                    f"\n{cmp.why or cmp.candidate}")
                if not cmp.same:
                    return 1
        if args.truth:
            log(truth_table(truth(p, candidates(args.names), m, args.pairs)))
    except (StudyError, llamacpp_run.RunError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
