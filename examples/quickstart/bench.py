"""Benchmark for the quickstart (protected: candidates may not change it).

Builds a fixed, seeded corpus, times ``kernel.word_counts`` on it once (CPU time of this
process, so a second benchmark on the other core disturbs it little), checks the result
against a known checksum and prints two metrics:

    METRIC throughput=<words per second>   (maximize)
    METRIC peak_kb=<peak resident memory in KiB>   (minimize, a guard)

A wrong result prints no metric and exits 1, so a fast but wrong candidate is never kept.
Single-threaded on purpose: two runs on a two-core machine barely disturb each other.
"""

from __future__ import annotations

import bisect
import random
import resource
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kernel

SEED = 20240601
DOCS = 10_000
VOCABULARY = 4_000
EXPECTED_CHECKSUM = 0x15E36C0B  # crc32 of the correct word counts, see checksum()


def corpus(seed: int = SEED, n_docs: int = DOCS, vocab: int = VOCABULARY) -> list[str]:
    """Documents of Zipf-distributed synthetic words, some capitalised or punctuated."""
    rng = random.Random(seed)
    consonants, vowels = "bcdfghjklmnpqrstvwxz", "aeiou"
    stems: set[str] = set()
    while len(stems) < vocab:
        syllables = 1 + int(rng.random() * 3)
        stems.add("".join(consonants[int(rng.random() * 20)] + vowels[int(rng.random() * 5)]
                          for _ in range(syllables)))
    endings = ["", "", "", "s", "ed", "ing", "ly", "es"]
    words = [s + endings[int(rng.random() * len(endings))] for s in sorted(stems)]
    cumulative: list[float] = []
    acc = 0.0
    for rank in range(1, vocab + 1):
        acc += 1.0 / rank**1.05
        cumulative.append(acc)
    docs = []
    for _ in range(n_docs):
        tokens = []
        for _ in range(20 + int(rng.random() * 60)):
            word = words[bisect.bisect_left(cumulative, rng.random() * acc)]
            u = rng.random()
            if u < 0.10:
                word = word.capitalize()
            elif u < 0.15:
                word += ","
            elif u < 0.18:
                word += "."
            tokens.append(word)
        docs.append(" ".join(tokens))
    return docs


def checksum(counts: dict[str, int]) -> int:
    """Order-independent and stable across processes (no hash())."""
    text = "".join(f"{word} {n}\n" for word, n in sorted(counts.items()))
    return zlib.crc32(text.encode())


def main() -> int:
    docs = corpus()
    words = sum(len(d.split()) for d in docs)
    start = time.process_time()  # CPU time: other load on the machine barely moves it
    counts = kernel.word_counts(docs)
    elapsed = time.process_time() - start
    got = checksum(counts)
    if got != EXPECTED_CHECKSUM:
        print(f"wrong result: checksum {got:#010x}, expected {EXPECTED_CHECKSUM:#010x}",
              file=sys.stderr)
        return 1
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    if sys.platform == "darwin":
        peak_kb //= 1024  # bytes there
    print(f"words={words} seconds={elapsed:.4f}")
    print(f"METRIC throughput={words / elapsed:.1f}")
    print(f"METRIC peak_kb={peak_kb}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
