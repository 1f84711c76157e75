"""Sources and the BM25 index: documents, PDFs, repositories; passages cite file:line."""

from __future__ import annotations

from pathlib import Path

import pytest
from research_helpers import git, write

from assay.research.index import PassageIndex, passages_of, tokenize
from assay.research.sources import (
    Source,
    SourceError,
    SourceReport,
    materialize,
    parse_source,
    read_documents,
)


def make_pdf(path: Path, pages: list[str]) -> Path:
    """A minimal valid PDF with one line of Helvetica text per page."""
    objs: list[bytes] = []
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objs.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objs.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    font = 3 + 2 * len(pages)
    for i, text in enumerate(pages):
        objs.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents "
                    f"{4 + 2 * i} 0 R /Resources << /Font << /F1 {font} 0 R >> >> >>"
                    .encode())
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        objs.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream
                    + b"\nendstream")
    objs.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objs) + 1, xref)
    path.write_bytes(bytes(out))
    return path


def test_tokenize_splits_identifiers_and_keeps_them() -> None:
    toks = tokenize("ggml_compute_forward_rms_norm and RmsNormKernel")
    assert "ggml_compute_forward_rms_norm" in toks
    assert {"rms", "norm", "kernel", "compute"} <= set(toks)
    assert "and" not in toks


def test_index_finds_the_passage_with_its_lines(tmp_path: Path) -> None:
    filler = "".join(f"line {i} about tokenizers and vocabularies\n" for i in range(60))
    write(tmp_path / "docs" / "a.md", filler + "The attention softmax is computed online.\n")
    write(tmp_path / "docs" / "b.txt", "Prefetching did nothing: decoding is memory-bound.\n"
          "Fuse the rms norm with the multiply instead.\n")
    src = parse_source("docs", tmp_path)
    assert src.kind == "doc"
    report = SourceReport()
    index = PassageIndex.build(read_documents(src, tmp_path / "docs", report))
    assert report.read == ["docs (doc, 2 files)"]
    hits = index.search("memory-bound fuse rms norm", k=2)
    assert hits[0].passage.citation == "docs/b.txt:1-2"
    softmax = index.search("online softmax", k=1)[0].passage
    assert softmax.path == "docs/a.md"
    assert softmax.start <= 61 <= softmax.end  # the sentence is on line 61
    assert index.search("zebra", k=3) == []


def test_pdf_pages_are_passages(tmp_path: Path) -> None:
    pdf = make_pdf(tmp_path / "paper.pdf", ["Introduction to caching",
                                            "Kernel fusion of RMSNorm and multiply"])
    src = parse_source(str(pdf), tmp_path)
    assert src.kind == "paper"
    docs = list(read_documents(src, pdf))
    assert len(docs) == 1 and docs[0].paged
    passages = passages_of(docs[0])
    assert [p.start for p in passages] == [1, 2]
    hit = PassageIndex(passages).search("fusion RMSNorm", k=1)[0]
    assert hit.passage.citation == "paper.pdf#page=2"
    assert hit.passage.kind == "paper"


def test_source_kinds(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    write(root / "backends" / "gpu" / "k.cu", "void f() {}\n")
    write(root / "notes" / "n.md", "# notes\n")
    write(tmp_path / "fork" / "x.c", "int main() { return 0; }\n")
    assert parse_source("backends/gpu", root).kind == "backend"
    assert parse_source("notes", root).kind == "doc"
    assert parse_source(str(tmp_path / "fork"), root).kind == "fork"
    url = parse_source("https://github.com/ggml-org/ggml.git#src/ggml-cuda", root)
    assert (url.kind, url.subdir, url.name) == ("fork", "src/ggml-cuda", "ggml/src/ggml-cuda")
    with pytest.raises(SourceError, match="does not exist"):
        parse_source("nope/", root)


def test_git_url_is_cloned_shallow_once(tmp_path: Path) -> None:
    upstream = tmp_path / "upstream"
    write(upstream / "ops.c", "void rms_norm_mul(void) {}\n")
    git(upstream, "init", "-q", ".")
    git(upstream, "add", ".")
    git(upstream, "commit", "-q", "-m", "one")
    write(upstream / "ops.c", "void rms_norm_mul(void) {}\nvoid softmax(void) {}\n")
    git(upstream, "commit", "-q", "-am", "two")
    state = tmp_path / "target" / ".assay"
    src = Source(f"file://{upstream}", "fork")
    path = materialize(src, state)
    assert path.parent == state / "research" / "repos"
    assert "softmax" in (path / "ops.c").read_text()
    import subprocess

    count = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=path,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert count == "1"  # shallow
    # cached: found again even offline
    assert materialize(src, state, offline=True) == path
    with pytest.raises(SourceError, match="offline"):
        materialize(Source("file:///nowhere/else.git", "fork"), state, offline=True)
    with pytest.raises(SourceError, match="cannot clone"):
        materialize(Source(f"file://{tmp_path}/missing.git", "fork"), state)
