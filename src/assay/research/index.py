"""A BM25 index over passages of the research sources, each citing its file and lines.

Documents are cut into overlapping windows of lines (code and prose alike; a PDF gives one
passage per page). Tokens split identifiers as well as keeping them whole, so the query
``rms norm`` finds ``ggml_compute_forward_rms_norm_mul`` and ``RmsNorm``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..errors import require
from .sources import Document

WINDOW = 30
OVERLAP = 10
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_STOP_TEXT = """
a an and are as at be but by for from has have if in into is it its of on or that the this
to was were will with not no self return def int const void static struct float double auto
include define else elif endif ifdef ifndef true false none null import
"""
STOPWORDS = frozenset(_STOP_TEXT.split())


@dataclass(frozen=True)
class Passage:
    path: str  # citation path of the file
    start: int  # first line (1-based), or page for a PDF
    end: int  # last line, inclusive
    text: str
    kind: str  # doc, paper, fork, backend
    paged: bool = False
    title: str = ""

    @property
    def citation(self) -> str:
        if self.path.startswith(("http://", "https://")):
            return self.path  # a paper found remotely: its abstract page
        if self.paged:
            return f"{self.path}#page={self.start}"
        if self.start == self.end:
            return f"{self.path}:{self.start}"
        return f"{self.path}:{self.start}-{self.end}"


@dataclass(frozen=True)
class Hit:
    passage: Passage
    score: float
    query: str


def tokenize(text: str) -> list[str]:
    """Lower-case words, with identifiers split at ``_`` and camelCase and kept whole."""
    out: list[str] = []
    for word in _WORD.findall(text):
        parts = [p for chunk in word.split("_") for p in _CAMEL.findall(chunk)] or [word]
        lowered = [p.lower() for p in parts if p]
        if len(lowered) > 1:
            out.append(word.lower())
        out.extend(p for p in lowered if p not in STOPWORDS and len(p) > 1)
    return out


def passages_of(doc: Document, window: int = WINDOW, overlap: int = OVERLAP) -> list[Passage]:
    if doc.paged:
        return [Passage(doc.path, i + 1, i + 1, page, doc.kind, True, doc.title)
                for i, page in enumerate(doc.lines) if page.strip()]
    out: list[Passage] = []
    n = len(doc.lines)
    step = max(1, window - overlap)
    start = 0
    while start < n:
        end = min(n, start + window)
        chunk = doc.lines[start:end]
        if any(line.strip() for line in chunk):
            out.append(Passage(doc.path, start + 1, end, "\n".join(chunk), doc.kind,
                               False, doc.title))
        if end >= n:
            break
        start += step
    return out


class PassageIndex:
    """BM25 (bm25s) over passages; :meth:`search` returns hits with citations."""

    def __init__(self, passages: Sequence[Passage]) -> None:
        self.passages = list(passages)
        self._retriever = None
        if self.passages:
            bm25s = require("bm25s", "research", "Indexing research sources")
            retriever = bm25s.BM25()  # type: ignore[attr-defined]
            corpus = [tokenize(p.text + " " + p.path + " " + p.title) or ["_"]
                      for p in self.passages]
            retriever.index(corpus, show_progress=False)
            self._retriever = retriever

    @classmethod
    def build(cls, documents: Iterable[Document]) -> PassageIndex:
        return cls([p for d in documents for p in passages_of(d)])

    def __len__(self) -> int:
        return len(self.passages)

    def search(self, query: str, k: int = 5, kinds: Sequence[str] = ()) -> list[Hit]:
        tokens = tokenize(query)
        if self._retriever is None or not tokens:
            return []
        want = min(len(self.passages), max(k * 4 if kinds else k, k))
        docs, scores = self._retriever.retrieve([tokens], k=want, show_progress=False)
        hits = []
        for i, s in zip(docs[0], scores[0], strict=False):
            score = float(s)
            if score <= 0:
                continue
            passage = self.passages[int(i)]
            if kinds and passage.kind not in kinds:
                continue
            hits.append(Hit(passage, score, query))
            if len(hits) >= k:
                break
        return hits
