"""Stand-in for karpathy/autoresearch's `prepare.py`: the program trains on examples/gpt's
corpus, read in order, and is scored by examples/gpt's `evaluate_bpb`.

`GPT_PREPARE` names examples/gpt's `prepare.py`; its corpus must be built first
(`python prepare.py` there). `KARPATHY_TIME_BUDGET` overrides the 300 s budget.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from typing import Any

import torch

MAX_SEQ_LEN = 2048
TIME_BUDGET = float(os.environ.get("KARPATHY_TIME_BUDGET", "300"))

_spec = importlib.util.spec_from_file_location("gpt_prepare", os.environ["GPT_PREPARE"])
assert _spec is not None and _spec.loader is not None
gpt = importlib.util.module_from_spec(_spec)
sys.modules["gpt_prepare"] = gpt  # dataclasses look their module up while the file runs
_spec.loader.exec_module(gpt)
_data: Any = None


def data() -> Any:
    global _data
    if _data is None:
        _data = gpt.Data(torch.device("cuda"), gpt.preset("default"))
    return _data


class Tokenizer:
    @classmethod
    def from_directory(cls) -> Tokenizer:
        return cls()

    def get_vocab_size(self) -> int:
        return int(data().vocab_size)


def make_dataloader(tokenizer: Tokenizer, batch: int, seq_len: int,
                    split: str) -> Iterator[tuple[Any, Any, int]]:
    if split != "train" or seq_len != data().seq_len:
        raise SystemExit(f"stand-in prepare: only the train split at {data().seq_len} tokens")
    while True:
        x, y = data().next_batch(batch, seq_len)
        yield x, y, int(data().epochs) + 1


def evaluate_bpb(model: Any, tokenizer: Tokenizer, batch: int) -> float:
    return float(gpt.evaluate_bpb(lambda x: model(x), data(), batch)["val_bpb"])
