"""examples/gpt on a CPU: the tiny preset's printed contract, byte-exact val_bpb, the user
corpus loaders, fast-fail, and the knobs that assay.toml declares."""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gpt"
CONTRACT = ("val_bpb", "mfu_percent", "total_tokens_M", "num_steps", "peak_vram_mb",
            "training_seconds", "total_seconds")


@pytest.fixture(scope="module")
def prep() -> ModuleType:
    sys.path.insert(0, str(EXAMPLE))
    try:
        return importlib.import_module("prepare")
    finally:
        sys.path.remove(str(EXAMPLE))


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(GPT_CACHE_DIR=str(cache), GPT_PRESET="tiny", PYTHONUNBUFFERED="1",
               OMP_NUM_THREADS="1", **extra)
    src = str(EXAMPLE.parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _summary(out: str) -> dict[str, str]:
    assert "\n---\n" in out, out[-2000:]
    block = out.rsplit("\n---\n", 1)[1]
    pairs = [line.split(": ", 1) for line in block.splitlines() if ": " in line]
    return {k: v for k, v in pairs}


@pytest.fixture(scope="module")
def tiny_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("gptcache")
    proc = subprocess.run([sys.executable, "prepare.py"], cwd=EXAMPLE, env=_env(cache),
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return cache


def _train(workdir: Path, cache: Path, timeout: float = 240, **env: str
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "train.py"], cwd=workdir,
                          env=_env(cache, **env), capture_output=True, text=True,
                          timeout=timeout, check=False)


# --- the printed contract ---------------------------------------------------------------


def test_tiny_run_prints_the_contract(tiny_cache: Path) -> None:
    proc = _train(EXAMPLE, tiny_cache, GPT_TIME_BUDGET="2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(r"^attention: \w+", out, re.MULTILINE)
    assert re.search(r"^compile: (none|optimizer|full)$", out, re.MULTILINE)
    vals = _summary(out)
    for key in CONTRACT:
        assert key in vals, f"{key} missing from the summary"
    assert 0.5 < float(vals["val_bpb"]) < 12
    assert vals["mfu_percent"] == "unknown" or 0 <= float(vals["mfu_percent"]) <= 100
    assert int(vals["num_steps"]) >= 1
    assert float(vals["total_tokens_M"]) > 0
    assert float(vals["training_seconds"]) >= 2.0
    assert float(vals["total_seconds"]) >= float(vals["training_seconds"])
    assert 0 < float(vals["epochs"]) < 1
    assert vals["recompiles"] == "0"
    # assay's own reader sees the same block
    from assay.bench.metrics import parse_summary_block

    readings = parse_summary_block(out)
    assert float(readings["val_bpb"][0].raw) == pytest.approx(float(vals["val_bpb"]))


# --- val_bpb from exact byte counts ---------------------------------------------------------


def test_bpb_counts_utf8_bytes_of_the_text(prep: Any) -> None:
    docs = ["héllo wörld — naïve café 日本語 🙂🙂\n", "plain ascii text, 42 bytes and more.\n",
            "Ελληνικά και русский ✓\n"]
    tok = prep.train_tokenizer(docs * 20, vocab_size=300)
    bos = tok.token_to_id(prep.BOS)
    stream, counts = prep.encode_docs(tok, docs, bos)
    assert int(counts.sum()) == stream.size
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    assert nbytes > sum(len(d) for d in docs)  # multi-byte characters are in there
    for d in docs:  # lossless: the byte count is the text's, whatever the tokens are
        assert tok.decode(tok.encode(d, add_special_tokens=False).ids) == d
    vocab = tok.get_vocab_size()

    def uniform(x: Any) -> Any:  # zero logits: every token costs ln(vocab) nats
        return torch.zeros(*x.shape, vocab)

    seq_len = 8
    res = prep.evaluate_stream(uniform, torch.from_numpy(stream.astype("int64")), nbytes,
                               bos, 2, seq_len, torch.device("cpu"))
    targets = stream.size - len(docs)  # every token except the BOS markers
    assert res["val_tokens"] == targets
    assert res["val_bytes"] == nbytes
    assert res["val_bpb"] == pytest.approx(targets * math.log(vocab) / (math.log(2) * nbytes))
    assert prep.bits_per_byte(math.log(2) * 10, 10) == pytest.approx(1.0)


def test_eval_batches_score_each_token_once(prep: Any) -> None:
    stream = torch.arange(1, 24)  # no BOS (id 0) inside
    seen: list[int] = []
    shapes = set()
    for x, y in prep.eval_batches(stream, 2, 5, pad_id=0):
        shapes.add(tuple(x.shape))
        seen += [int(v) for v in y.flatten() if v != -1]
        assert (x[y != -1] + 1 == y[y != -1]).all()
    assert seen == list(range(2, 24))
    assert shapes == {(2, 5)}  # one shape: a compiled model never recompiles for the tail


# --- user corpora ---------------------------------------------------------------------------


def test_text_loader(prep: Any, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    for i in range(40):
        (tmp_path / "sub" / f"doc{i:02d}.txt").write_text(f"document {i} ünïcode\n" * 3)
    (tmp_path / "skip.bin").write_bytes(b"\x00\x01")
    (tmp_path / "empty.txt").write_text("   \n")
    docs = list(prep.text_docs(str(tmp_path), val_permille=200))
    assert len(docs) == 40
    assert all(d.key.startswith("text/sub/doc") for d in docs)
    splits = {d.split for d in docs}
    assert splits == {"train", "val"}
    again = list(prep.text_docs(str(tmp_path), val_permille=200))
    assert [d.split for d in again] == [d.split for d in docs]  # split by file, stable
    one = list(prep.text_docs(str(tmp_path / "sub" / "doc01.txt"), val_permille=0))
    assert len(one) == 1 and one[0].split == "train"
    with pytest.raises(SystemExit):
        list(prep.text_docs(str(tmp_path / "missing"), val_permille=10))


def test_parquet_loader(prep: Any, tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    for shard in range(3):
        rows = [f"shard {shard} row {r} — ok" for r in range(50)] + [None, ""]
        pq.write_table(pa.table({"text": rows, "n": list(range(52))}),
                       tmp_path / f"shard_{shard:03d}.parquet")
    docs = list(prep.parquet_docs(str(tmp_path), val_permille=10))
    assert len(docs) == 150  # empty and null rows dropped
    val = [d for d in docs if d.split == "val"]
    assert val and all("shard_002" in d.key for d in val)  # the last shard, held out by file
    single = tmp_path / "one"
    single.mkdir()
    pq.write_table(pa.table({"body": [f"row {r}" for r in range(400)]}), single / "a.parquet")
    docs = list(prep.parquet_docs(str(single), val_permille=100, column="body"))
    assert len(docs) == 400 and 0 < sum(d.split == "val" for d in docs) < 100
    with pytest.raises(SystemExit):
        list(prep.parquet_docs(str(single), val_permille=100, column="text"))


def test_build_from_user_text_and_load(prep: Any, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(30):
        (corpus / f"f{i}.md").write_text(f"# Title {i}\n\nSome text, ça va? 😀 {i * 7}\n" * 40)
    p = prep.PRESETS["tiny"]
    meta = prep.build([f"text:{corpus}"], p, tmp_path / "cache" / "tiny")
    assert meta["val_files"] >= 1 and meta["train_files"] + meta["val_files"] == 30
    assert len(meta["corpus_sha256"]) == 64
    assert (tmp_path / "cache" / "tiny" / "manifest.tsv").read_text().count("\n") == 30
    again = prep.build([f"text:{corpus}"], p, tmp_path / "cache2" / "tiny")
    assert again["corpus_sha256"] == meta["corpus_sha256"]  # the same files, the same hash
    old = os.environ.get("GPT_CACHE_DIR")
    os.environ["GPT_CACHE_DIR"] = str(tmp_path / "cache")
    try:
        data = prep.Data(torch.device("cpu"), p)
    finally:
        if old is None:
            del os.environ["GPT_CACHE_DIR"]
        else:
            os.environ["GPT_CACHE_DIR"] = old
    assert 0 < data.eval_bytes <= meta["val_bytes"]
    x, y = data.next_batch(2, 16)
    assert x.shape == (2, 16) and (x[:, 1:] == y[:, :-1]).all()
    assert data.epochs == pytest.approx(32 / data.train_tokens)


# --- fast-fail ------------------------------------------------------------------------------


def test_failfast_unit(prep: Any) -> None:
    guard = prep.FailFast(512)
    guard.check(0, 6.2)
    with pytest.raises(SystemExit):
        guard.check(1, float("nan"))
    with pytest.raises(SystemExit):
        guard.check(12, 100.0)
    guard.check(3, 50.0)  # early spikes are tolerated
    stuck = prep.FailFast(512)
    for step in range(20):
        stuck.check(step, math.log(512))
    assert stuck.stalled()


def test_nan_stops_the_run_within_seconds(tiny_cache: Path, tmp_path: Path) -> None:
    from assay.repo.workspace import rewrite_assignment

    for name in ("prepare.py", "train.py"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    train = tmp_path / "train.py"
    train.write_text(rewrite_assignment(train.read_text(), "LOGIT_CAP", float("nan"),
                                        "train.py").replace("= nan", "= float('nan')"))
    proc = _train(tmp_path, tiny_cache, GPT_TIME_BUDGET="30")
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "FAIL: loss is nan at step 0" in proc.stdout
    assert "val_bpb" not in proc.stdout


# --- knobs and config -----------------------------------------------------------------------


def test_config_params_are_single_assignments() -> None:
    import assay.config.spec as config
    from assay.repo.workspace import rewrite_assignment

    target = config.load(EXAMPLE)
    assert target.metric.name == "val_bpb" and target.metric.reader == "summary_block"
    assert target.is_protected("prepare.py") and target.is_editable("train.py")
    names = {p.name for p in target.params}
    assert {"TOTAL_BATCH_SIZE", "DEVICE_BATCH_SIZE", "TIME_BUDGET", "LR_MULT", "DEPTH",
            "COMPILE", "ATTENTION"} <= names
    text = (EXAMPLE / "train.py").read_text()
    for p in target.params:
        assert p.apply == "assign" and p.file == "train.py"
        value = p.default if p.default is not None else p.grid()[0]
        rewritten = rewrite_assignment(text, p.name, value, "train.py")
        assert rewritten != text or repr(value) in text or str(value) in text
        for choice in p.choices:
            rewrite_assignment(text, p.name, choice, "train.py")


@pytest.mark.parametrize(("name", "knobs"), [
    ("session.toml", {"DEVICE_BATCH_SIZE", "TOTAL_BATCH_SIZE", "MATRIX_LR"}),
    ("shape_session.toml", {"MODEL_DIM", "DEPTH"}),
    ("schedule_session.toml", {"MATRIX_LR", "EMBED_LR", "WARMDOWN_FRAC"})])
def test_h200_session_config_sweeps_train_py(tmp_path: Path, name: str,
                                              knobs: set[str]) -> None:
    # benchmarks/karpathy/*session.toml are the configs of the H200 sessions in gpt_h200.md:
    # each must load beside a copy of examples/gpt and every grid point must rewrite train.py.
    import assay.config.spec as config
    from assay.repo.workspace import rewrite_assignment

    for f in EXAMPLE.iterdir():
        if f.is_file():
            shutil.copy(f, tmp_path / f.name)
    shutil.copy(EXAMPLE.parents[1] / "benchmarks" / "karpathy" / name, tmp_path / "assay.toml")
    target = config.load(tmp_path)
    assert target.metric.name == "val_bpb" and target.run.warm_up == "incumbent"
    assert {p.name for p in target.params} == knobs
    text = (tmp_path / "train.py").read_text()
    for p in target.params:
        for value in p.grid():
            assert f"{p.name} = {value}" in rewrite_assignment(text, p.name, value, "train.py")


def test_flops_formula(prep: Any) -> None:
    # 6·N plus causal attention 6·L·T·d
    assert prep.flops_per_token(1000, 2, 16, 8) == 6 * 1000 + 6 * 2 * 16 * 8


def test_fingerprint_names_torch_and_the_corpus(tiny_cache: Path) -> None:
    proc = subprocess.run([sys.executable, "prepare.py", "--fingerprint"], cwd=EXAMPLE,
                          env=_env(tiny_cache), capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if ": " in line)
    assert lines["torch"] == torch.__version__
    meta = json.loads((tiny_cache / "tiny" / "meta.json").read_text())
    assert lines["corpus_sha256"] == meta["corpus_sha256"]
