"""Word statistics over a corpus of documents: the code assay tunes in the quickstart.

The three knobs below are plain assignments so that a sweep can rewrite them
(``apply = "assign"`` in assay.toml). Their starting values are deliberately poor.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Sequence

CHUNK = 2  # documents tokenised and merged per batch
CACHE_SIZE = 32  # entries in the word-normalisation cache (0: no cache)
COUNTER = "dict"  # how a batch is counted: "dict", "counter" or "sorted"

SUFFIXES = ("ingly", "ings", "ing", "edly", "ed", "es", "ly", "s")
PUNCTUATION = ".,;:!?\"'()"


def normalize(word: str) -> str:
    """Lower-case, strip punctuation and one common suffix (a crude stemmer)."""
    w = word.lower().strip(PUNCTUATION)
    for suffix in SUFFIXES:
        if len(w) > len(suffix) + 2 and w.endswith(suffix):
            return w[: -len(suffix)]
    return w


def _normalizer() -> Callable[[str], str]:
    if CACHE_SIZE > 0:
        return functools.lru_cache(maxsize=CACHE_SIZE)(normalize)
    return normalize


def _count_batch(terms: list[str]) -> dict[str, int]:
    if COUNTER == "counter":
        return Counter(terms)
    if COUNTER == "sorted":
        terms.sort()
        out: dict[str, int] = {}
        run_start = 0
        for i in range(1, len(terms) + 1):
            if i == len(terms) or terms[i] != terms[run_start]:
                out[terms[run_start]] = i - run_start
                run_start = i
        return out
    counts: dict[str, int] = {}
    for term in terms:
        counts[term] = counts.get(term, 0) + 1
    return counts


def word_counts(docs: Sequence[str]) -> dict[str, int]:
    """How often each normalised word occurs in ``docs``."""
    norm = _normalizer()
    total: dict[str, int] = {}
    for start in range(0, len(docs), CHUNK):
        words = " ".join(docs[start : start + CHUNK]).split()
        batch = _count_batch([norm(w) for w in words])
        for term, n in batch.items():
            total[term] = total.get(term, 0) + n
    return total
