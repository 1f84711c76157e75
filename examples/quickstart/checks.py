"""Correctness check for the quickstart (protected): exit 0 when kernel.py is right.

Compares ``kernel.word_counts`` with a plain reference implementation on a small
hand-checked text and on a seeded corpus different from the benchmark's, so a candidate
cannot pass by special-casing the benchmark input.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench
import kernel

SUFFIXES = ("ingly", "ings", "ing", "edly", "ed", "es", "ly", "s")


def reference(docs: list[str]) -> dict[str, int]:
    def normalize(word: str) -> str:
        w = word.lower().strip(".,;:!?\"'()")
        for suffix in SUFFIXES:
            if len(w) > len(suffix) + 2 and w.endswith(suffix):
                return w[: -len(suffix)]
        return w

    return dict(Counter(normalize(w) for doc in docs for w in doc.split()))


def main() -> int:
    small = ["Walking dogs walked.", "the dog walks, (quickly)", "", "is as bus"]
    expected = {"walk": 3, "dog": 2, "the": 1, "quick": 1, "is": 1, "as": 1, "bus": 1}
    problems = []
    got = kernel.word_counts(small)
    if got != expected:
        problems.append(f"small text: got {got}, expected {expected}")
    docs = bench.corpus(seed=7, n_docs=400, vocab=600)
    got = kernel.word_counts(docs)
    want = reference(docs)
    if got != want:
        wrong = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
        problems.append(f"seeded corpus: {len(wrong)} words counted wrong, e.g. {wrong[:5]}")
    if kernel.word_counts([]) != {}:
        problems.append("an empty corpus must give no counts")
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    if not problems:
        print("checks passed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
