"""Data, tokenizer, evaluation and accounting for the GPT example. Not to be edited.

Run once before training (assay runs it as the build step)::

    python prepare.py                  # the built-in corpus, full size
    python prepare.py --preset tiny    # a few MB, for CPU tests
    python prepare.py --source text:/data/books --source parquet:/data/shards

The built-in corpus needs no network: it is the text already on this machine, namely the
Python standard library's source and the installed packages' source, type stubs,
documentation and metadata (see ``collect_builtin``). The file list is fixed by rule and
written to ``manifest.tsv`` in the cache folder; ``corpus_sha256`` hashes that manifest
(every file's path, size and content hash), so two runs compare only if it matches.
Validation is held out by file: a file goes to validation when a hash of its path falls in
the first ``VAL_PERMILLE`` of a thousand buckets.

val_bpb is the summed cross-entropy (nats) of every validation token, over ln 2 times the
exact number of UTF-8 bytes of the validation documents evaluated. Evaluation covers whole
documents only, so the byte count is the length of their text, never a sum over decoded
single tokens.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import sysconfig
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# The repository's own hardware table (stdlib only). Found through the installed package,
# or through ../../src when the example runs from a checkout (PYTHONPATH=src also works).
try:
    from assay import hardware
except ImportError:  # pragma: no cover - depends on how the example is run
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from assay import hardware

# ---------------------------------------------------------------------------------------
# Fixed constants. Changing any of them changes what val_bpb means.
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Preset:
    name: str
    vocab_size: int
    seq_len: int
    eval_tokens: int  # evaluation stops after the document that reaches this many tokens
    max_corpus_bytes: int  # the built-in corpus is cut here (files taken in hash order)
    tokenizer_train_bytes: int  # text the BPE is trained on (training files, hash order)
    val_permille: int  # share of files held out for validation, per thousand


PRESETS = {
    "default": Preset("default", vocab_size=8192, seq_len=2048, eval_tokens=2**21,
                      max_corpus_bytes=1_200_000_000, tokenizer_train_bytes=64_000_000,
                      val_permille=20),
    "tiny": Preset("tiny", vocab_size=512, seq_len=128, eval_tokens=2**13,
                   max_corpus_bytes=1_500_000, tokenizer_train_bytes=1_000_000,
                   val_permille=50),
}
BOS = "<|bos|>"
TEXT_SUFFIXES = (".py", ".pyi", ".md", ".rst", ".txt")
MAX_FILE_BYTES = 2_000_000  # larger files are mostly generated tables
MAX_MEAN_LINE = 300  # characters; minified or data-like files are skipped


def preset(name: str | None = None) -> Preset:
    name = name or os.environ.get("GPT_PRESET", "default")
    if name not in PRESETS:
        raise SystemExit(f"unknown preset {name!r}; one of {', '.join(PRESETS)}")
    return PRESETS[name]


def cache_dir(p: Preset) -> Path:
    root = os.environ.get("GPT_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "assay-gpt")
    return Path(root) / p.name


# ---------------------------------------------------------------------------------------
# Corpora
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Doc:
    key: str  # stable name: where it came from, independent of this machine's paths
    text: str
    split: str  # "train" or "val"


def _bucket(key: str) -> int:
    return int(hashlib.sha1(key.encode("utf-8")).hexdigest()[:8], 16) % 1000


def _order(key: str) -> str:
    return hashlib.sha256(("order:" + key).encode("utf-8")).hexdigest()


def _readable(raw: bytes) -> str | None:
    if b"\x00" in raw:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = text.count("\n") + 1
    if not text.strip() or len(text) / lines > MAX_MEAN_LINE:
        return None
    return text


def builtin_roots() -> list[tuple[str, Path]]:
    """(label, folder) pairs the built-in corpus reads: stdlib, then package folders."""
    paths = sysconfig.get_paths()
    roots: list[tuple[str, Path]] = []
    seen: set[Path] = set()
    for label, key in (("stdlib", "stdlib"), ("site", "purelib"), ("site", "platlib")):
        folder = Path(paths[key]).resolve()
        if folder not in seen and folder.is_dir():
            roots.append((label, folder))
            seen.add(folder)
    return roots


def collect_builtin(max_bytes: int) -> list[tuple[str, Path]]:
    """The built-in corpus's files as (key, path), sorted by key.

    Rule: every file under the standard library folder (not its site-packages) and under
    the package folders whose suffix is one of ``TEXT_SUFFIXES`` or that is a package's
    ``METADATA``; no ``__pycache__``, no file over ``MAX_FILE_BYTES``, no file that is not
    UTF-8 text or whose mean line is over ``MAX_MEAN_LINE`` characters; identical contents
    kept once (first key wins); then files taken in hash order of their key until
    ``max_bytes``. Keys are ``stdlib/<relative path>`` or ``site/<relative path>``.
    """
    found: dict[str, Path] = {}
    roots = builtin_roots()
    site_folders = {r for label, r in roots if label == "site"}
    for label, root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            dirnames[:] = sorted(
                d for d in dirnames
                if d != "__pycache__" and not (label == "stdlib" and (
                    d in ("site-packages", "dist-packages") or here / d in site_folders)))
            for fn in filenames:
                if not (fn.endswith(TEXT_SUFFIXES) or fn == "METADATA"):
                    continue
                path = here / fn
                key = f"{label}/{path.relative_to(root).as_posix()}"
                found.setdefault(key, path)
    chosen: list[tuple[str, Path]] = []
    total = 0
    for key in sorted(found, key=_order):
        try:
            size = found[key].stat().st_size
        except OSError:
            continue
        if size == 0 or size > MAX_FILE_BYTES:
            continue
        if total + size > max_bytes:
            continue
        chosen.append((key, found[key]))
        total += size
    return sorted(chosen)


def builtin_docs(p: Preset) -> Iterator[Doc]:
    seen: set[str] = set()
    for key, path in collect_builtin(p.max_corpus_bytes):
        try:
            raw = path.read_bytes()
        except OSError:
            continue
        text = _readable(raw)
        if text is None:
            continue
        digest = hashlib.sha256(raw).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        yield Doc(key, text, "val" if _bucket(key) < p.val_permille else "train")


def _expand(spec: str, suffixes: tuple[str, ...]) -> list[Path]:
    path = Path(spec).expanduser()
    if path.is_dir():
        return sorted(f for f in path.rglob("*") if f.is_file() and f.name.endswith(suffixes))
    if any(ch in spec for ch in "*?["):
        base = Path(path.anchor or ".")
        pattern = str(path.relative_to(base)) if path.is_absolute() else spec
        return sorted(f for f in base.glob(pattern) if f.is_file())
    if path.is_file():
        return [path]
    raise SystemExit(f"no such file or folder: {spec}")


def text_docs(spec: str, val_permille: int,
              suffixes: tuple[str, ...] = (".txt", ".md", ".rst", ".py", ".text")
              ) -> Iterator[Doc]:
    """User text files: a folder (searched recursively), a glob or one file; one document
    per file; a file goes to validation by the hash of its path relative to ``spec``."""
    files = _expand(spec, suffixes)
    if not files:
        raise SystemExit(f"no text files found in {spec}")
    base = Path(spec).expanduser()
    for f in files:
        rel = f.relative_to(base).as_posix() if base.is_dir() else f.name
        text = f.read_bytes().decode("utf-8", errors="replace")
        if text.strip():
            key = f"text/{rel}"
            yield Doc(key, text, "val" if _bucket(key) < val_permille else "train")


def parquet_docs(spec: str, val_permille: int, column: str = "text") -> Iterator[Doc]:
    """User parquet shards (a folder, glob or file), one document per row of ``column``.

    With two or more shards the last one in name order is validation (held out by file);
    a single shard falls back to holding out rows by the hash of their position.
    """
    import pyarrow.parquet as pq

    files = _expand(spec, (".parquet",))
    if not files:
        raise SystemExit(f"no parquet files found in {spec}")
    for n, f in enumerate(files):
        pf = pq.ParquetFile(f)
        if column not in pf.schema_arrow.names:
            raise SystemExit(f"{f.name} has no column {column!r} "
                             f"(columns: {', '.join(pf.schema_arrow.names)})")
        row = 0
        for batch in pf.iter_batches(columns=[column], batch_size=4096):
            for value in batch.column(0).to_pylist():
                key = f"parquet/{f.name}#{row}"
                row += 1
                if not value:
                    continue
                if len(files) > 1:
                    split = "val" if n == len(files) - 1 else "train"
                else:
                    split = "val" if _bucket(key) < val_permille else "train"
                yield Doc(key, str(value), split)


def iter_docs(sources: list[str], p: Preset) -> Iterator[Doc]:
    for source in sources:
        kind, _, arg = source.partition(":")
        if kind == "builtin":
            yield from builtin_docs(p)
        elif kind == "text" and arg:
            yield from text_docs(arg, p.val_permille)
        elif kind == "parquet" and arg:
            column = "text"
            if "@" in arg:
                arg, column = arg.rsplit("@", 1)
            yield from parquet_docs(arg, p.val_permille, column)
        else:
            raise SystemExit(f"unknown source {source!r}: builtin, text:PATH or "
                             "parquet:PATH[@column]")


# ---------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> Any:
    """Byte-level BPE (lossless: every string encodes and decodes back to itself)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[BOS], min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return tok


def load_tokenizer(folder: Path) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def encode_docs(tok: Any, texts: list[str], bos: int) -> tuple[np.ndarray, np.ndarray]:
    """One stream: BOS, doc, BOS, doc ...; and each document's token count (BOS included)."""
    dtype = np.uint16 if tok.get_vocab_size() <= 65536 else np.uint32
    parts: list[np.ndarray] = []
    counts: list[int] = []
    for start in range(0, len(texts), 2048):
        for enc in tok.encode_batch(texts[start:start + 2048], add_special_tokens=False):
            ids = np.empty(len(enc.ids) + 1, dtype=dtype)
            ids[0] = bos
            ids[1:] = enc.ids
            parts.append(ids)
            counts.append(len(ids))
    stream = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
    return stream, np.asarray(counts, dtype=np.int64)


# ---------------------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------------------


def build(sources: list[str], p: Preset, out: Path, force: bool = False) -> dict[str, Any]:
    meta_path = out / "meta.json"
    if meta_path.exists() and not force:
        meta: dict[str, Any] = json.loads(meta_path.read_text())
        if meta.get("sources") == sources:
            print(f"prepared data found in {out} (corpus_sha256 {meta['corpus_sha256']})")
            return meta
    t0 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    train: list[Doc] = []
    val: list[Doc] = []
    for doc in iter_docs(sources, p):
        (val if doc.split == "val" else train).append(doc)
    if not train:
        raise SystemExit("the corpus has no training documents")
    if not val:  # a very small corpus: hold out the first training file in hash order
        first = min(range(len(train)), key=lambda i: _order(train[i].key))
        val.append(train.pop(first))
    # Training order: hash order of keys (a fixed shuffle); validation: sorted by key.
    train.sort(key=lambda d: _order(d.key))
    val.sort(key=lambda d: d.key)
    manifest = "".join(
        f"{d.split}\t{d.key}\t{len(d.text.encode('utf-8'))}\t"
        f"{hashlib.sha256(d.text.encode('utf-8')).hexdigest()}\n"
        for d in sorted(train + val, key=lambda d: d.key))
    (out / "manifest.tsv").write_text(manifest, encoding="utf-8")
    corpus_sha = hashlib.sha256(manifest.encode("utf-8")).hexdigest()
    t1 = time.time()

    sample: list[str] = []
    budget = p.tokenizer_train_bytes
    for d in train:
        if budget <= 0:
            break
        sample.append(d.text[:budget])
        budget -= len(sample[-1])
    tok = train_tokenizer(sample, p.vocab_size)
    tok.save(str(out / "tokenizer.json"))
    bos = tok.token_to_id(BOS)
    for d in val[:20]:  # the byte accounting relies on this
        ids = tok.encode(d.text, add_special_tokens=False).ids
        if tok.decode(ids, skip_special_tokens=False) != d.text:
            raise SystemExit(f"tokenizer is not lossless on {d.key}")
    t2 = time.time()

    train_ids, _ = encode_docs(tok, [d.text for d in train], bos)
    val_ids, val_counts = encode_docs(tok, [d.text for d in val], bos)
    val_bytes = np.asarray([len(d.text.encode("utf-8")) for d in val], dtype=np.int64)
    train_ids.tofile(out / "train.bin")
    val_ids.tofile(out / "val.bin")
    np.save(out / "val_doc_tokens.npy", val_counts)
    np.save(out / "val_doc_bytes.npy", val_bytes)
    meta = {
        "sources": sources, "preset": p.name, "vocab_size": tok.get_vocab_size(),
        "bos_id": bos, "dtype": str(train_ids.dtype), "seq_len": p.seq_len,
        "corpus_sha256": corpus_sha,
        "train_files": len(train), "val_files": len(val),
        "train_bytes": int(sum(len(d.text.encode("utf-8")) for d in train)),
        "val_bytes": int(val_bytes.sum()),
        "train_tokens": int(train_ids.size), "val_tokens": int(val_ids.size),
        "seconds": {"collect": round(t1 - t0, 1), "tokenizer": round(t2 - t1, 1),
                    "encode": round(time.time() - t2, 1)},
    }
    meta_path.write_text(json.dumps(meta, indent=1))
    print(json.dumps(meta, indent=1))
    return meta


# ---------------------------------------------------------------------------------------
# Runtime: what train.py uses
# ---------------------------------------------------------------------------------------


class Data:
    """Prepared tokens on the training device, and the fixed evaluation set."""

    def __init__(self, device: Any, p: Preset | None = None) -> None:
        import torch

        self.preset = p or preset()
        folder = cache_dir(self.preset)
        if not (folder / "meta.json").exists():
            flag = "" if self.preset.name == "default" else f" --preset {self.preset.name}"
            raise SystemExit(f"no prepared data in {folder}: run `python prepare.py{flag}` "
                             "first")
        self.meta: dict[str, Any] = json.loads((folder / "meta.json").read_text())
        self.vocab_size = int(self.meta["vocab_size"])
        self.bos_id = int(self.meta["bos_id"])
        self.seq_len = int(self.meta["seq_len"])
        dtype = np.dtype(self.meta["dtype"])
        train = np.fromfile(folder / "train.bin", dtype=dtype).astype(np.int32)
        self.train = torch.from_numpy(train).to(device)
        self.train_tokens = int(train.size)
        val = np.fromfile(folder / "val.bin", dtype=dtype).astype(np.int64)
        counts = np.load(folder / "val_doc_tokens.npy")
        nbytes = np.load(folder / "val_doc_bytes.npy")
        # whole documents until the token budget is reached
        ndocs = int(np.searchsorted(np.cumsum(counts), self.preset.eval_tokens) + 1)
        ndocs = min(ndocs, counts.size)
        ntok = int(counts[:ndocs].sum())
        self.eval_stream = torch.from_numpy(val[:ntok])
        self.eval_bytes = int(nbytes[:ndocs].sum())
        self.eval_docs = ndocs
        self.device = device
        self.pos = 0
        self.tokens_seen = 0

    def next_batch(self, batch: int, seq_len: int | None = None) -> tuple[Any, Any]:
        """The next ``batch`` x ``seq_len`` inputs and targets, read in order; wraps around."""
        t = seq_len or self.seq_len
        n = batch * t
        if n + 1 > self.train_tokens:
            raise SystemExit(f"a batch of {n} tokens is larger than the training set "
                             f"({self.train_tokens} tokens)")
        if self.pos + n + 1 > self.train_tokens:
            self.pos = 0
        chunk = self.train[self.pos:self.pos + n + 1].long()
        self.pos += n
        self.tokens_seen += n
        return chunk[:-1].view(batch, t), chunk[1:].view(batch, t)

    @property
    def epochs(self) -> float:
        return self.tokens_seen / max(1, self.train_tokens)


def eval_batches(stream: Any, batch: int, seq_len: int, pad_id: int) -> Iterator[tuple[Any, Any]]:
    """Rows of ``seq_len``: every token but the first is a target exactly once. The tail is
    padded and its targets are -1 (ignored); BOS targets are -1 too (they have no bytes)."""
    import torch

    n = stream.numel() - 1
    rows = max(1, math.ceil(n / seq_len))
    total = rows * seq_len
    x = torch.full((total,), pad_id, dtype=torch.long)
    y = torch.full((total,), -1, dtype=torch.long)
    x[:n] = stream[:-1]
    y[:n] = stream[1:]
    y[y == pad_id] = -1
    x = x.view(rows, seq_len)
    y = y.view(rows, seq_len)
    for start in range(0, rows, batch):
        xb, yb = x[start:start + batch], y[start:start + batch]
        if xb.size(0) < batch:  # keep one shape, so a compiled model does not recompile
            fill = batch - xb.size(0)
            xb = torch.cat([xb, torch.full((fill, seq_len), pad_id, dtype=torch.long)])
            yb = torch.cat([yb, torch.full((fill, seq_len), -1, dtype=torch.long)])
        yield xb, yb


def bits_per_byte(nats: float, nbytes: int) -> float:
    return nats / (math.log(2) * nbytes)


def evaluate_bpb(logits_fn: Callable[[Any], Any], data: Data, batch: int) -> dict[str, float]:
    """Validation bits per byte over the fixed evaluation documents.

    ``logits_fn(x)`` returns logits of shape (B, T, vocab); the loss is computed here, in
    float32, so a change to the model cannot change how it is scored.
    """
    return evaluate_stream(logits_fn, data.eval_stream, data.eval_bytes, data.bos_id,
                           batch, data.seq_len, data.device)


def evaluate_stream(logits_fn: Callable[[Any], Any], stream: Any, nbytes: int, bos_id: int,
                    batch: int, seq_len: int, device: Any) -> dict[str, float]:
    import torch
    import torch.nn.functional as F

    total = torch.zeros((), dtype=torch.float64, device=device)
    count = torch.zeros((), dtype=torch.long, device=device)
    with torch.no_grad():
        for x, y in eval_batches(stream, batch, seq_len, bos_id):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            logits = logits_fn(x)
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1),
                                   ignore_index=-1, reduction="sum")
            total += loss.double()
            count += (y != -1).sum()
    nats = float(total.item())
    return {"val_bpb": bits_per_byte(nats, nbytes), "val_nats": nats,
            "val_bytes": float(nbytes), "val_tokens": float(count.item())}


# ---------------------------------------------------------------------------------------
# Hardware, MFU, fast-fail, output
# ---------------------------------------------------------------------------------------


def flops_per_token(matmul_params: int, n_layers: int, seq_len: int, attn_dim: int) -> float:
    """Training FLOPs per token: 6·N for the weight matmuls (forward and backward; N counts
    every weight that multiplies activations, so the lm_head but not the embedding table)
    plus 6·L·T·d for causal attention (QK^T and AV, 2·2·T·d per token per layer if every
    position were attended, halved by the causal mask, times 3 for the backward pass).
    Recomputation inside attention kernels is not counted."""
    return 6.0 * matmul_params + 6.0 * n_layers * seq_len * attn_dim


@dataclass
class Accelerator:
    name: str
    kind: str  # "cuda" or "cpu"
    capability: tuple[int, int] | None
    peak: float | None  # dense FLOP/s at the training precision
    precision: str
    chip: str


def accelerator(device: Any, precision: str) -> Accelerator:
    import torch

    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        name = str(props.name)
        cap: tuple[int, int] | None = (int(props.major), int(props.minor))
    else:
        name, cap = hardware.cpu_model() or "unknown CPU", None
    chip = hardware.lookup(name)
    peak = chip.peak(precision) if chip else None
    return Accelerator(name, device.type, cap, peak, precision, chip.name if chip else "")


def mfu_text(flops_per_second: float, acc: Accelerator) -> str:
    if acc.peak is None:
        return "unknown"
    return f"{100.0 * flops_per_second / acc.peak:.2f}"


class FailFast:
    """Stops a run that has gone wrong, within a step, and says why."""

    def __init__(self, vocab_size: int) -> None:
        self.initial = math.log(vocab_size)
        self.limit = 1.5 * self.initial  # a loss above this after warm-up has exploded
        self.ema: float | None = None
        self.best = float("inf")

    def check(self, step: int, loss: float) -> None:
        if not math.isfinite(loss):
            fail(f"loss is {loss} at step {step}")
        if step >= 10 and loss > self.limit:
            fail(f"loss exploded to {loss:.3f} at step {step} "
                 f"(limit {self.limit:.2f} = 1.5 x ln(vocab))")
        self.ema = loss if self.ema is None else 0.9 * self.ema + 0.1 * loss
        self.best = min(self.best, self.ema)

    def stalled(self) -> bool:
        """True when the smoothed loss has not moved 5% below ln(vocab)."""
        return self.ema is not None and self.best > 0.95 * self.initial


def fail(reason: str) -> None:
    print(f"FAIL: {reason}", flush=True)
    sys.stdout.flush()
    raise SystemExit(3)


def print_summary(values: dict[str, Any]) -> None:
    """The block assay reads: ``---`` then ``key: value`` lines."""
    print("---")
    for key, value in values.items():
        if isinstance(value, float):
            text = f"{value:.6f}" if abs(value) < 1e6 else f"{value:.1f}"
        else:
            text = str(value)
        print(f"{key}: {text}")
    sys.stdout.flush()


def print_fingerprint(p: Preset) -> None:
    """torch, its CUDA and cuDNN, the GPU it sees, and the prepared corpus's hash."""
    import torch

    cuda = torch.cuda.is_available()
    meta_path = cache_dir(p) / "meta.json"
    corpus = json.loads(meta_path.read_text())["corpus_sha256"] if meta_path.exists() else ""
    for key, value in (("torch", torch.__version__), ("torch_cuda", torch.version.cuda or ""),
                       ("cudnn", torch.backends.cudnn.version() if cuda else ""),
                       ("gpu", torch.cuda.get_device_name(0) if cuda else ""),
                       ("corpus_sha256", corpus or "not prepared yet")):
        print(f"{key}: {value}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default=None, choices=sorted(PRESETS))
    ap.add_argument("--source", action="append", default=None,
                    help="builtin (default), text:PATH or parquet:PATH[@column]; repeatable")
    ap.add_argument("--force", action="store_true", help="rebuild even if prepared")
    ap.add_argument("--fingerprint", action="store_true",
                    help="print the software and corpus a run depends on, as key: value lines")
    args = ap.parse_args(argv)
    p = preset(args.preset)
    if args.fingerprint:
        print_fingerprint(p)
        return
    build(args.source or ["builtin"], p, cache_dir(p), force=args.force)


if __name__ == "__main__":
    main()
