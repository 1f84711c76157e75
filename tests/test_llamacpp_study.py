"""The llama.cpp study's parts that need no build: its patches' headers, the vendored tree
made a repository, the sdist unpacked, and the truth's paired effect on scripted values."""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "llamacpp_study.py"


@pytest.fixture(scope="module")
def study() -> ModuleType:
    spec = importlib.util.spec_from_file_location("llamacpp_study", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["llamacpp_study"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_every_patch_names_its_checks_and_one_must_fail(study: ModuleType) -> None:
    found = study.candidates([])
    assert len(found) == 9
    assert [c.name for c in found if c.expect == "invalid"] == ["09-wrong-flash-attn-mask-order"]
    for c in found:
        assert c.checks, c.name
        text = c.path.read_text()
        assert "diff --git a/ggml/src/ggml-cpu/" in text, c.name
        # the header says what, why and what the study found
        assert "# What:" in text and "# Why:" in text, c.name


def test_a_header_without_expect_is_refused(study: ModuleType, tmp_path: Path) -> None:
    bad = tmp_path / "x.patch"
    bad.write_text("# check: SOFT_MAX\ndiff --git a/f b/f\n")
    with pytest.raises(study.StudyError, match=r"expect: valid\|invalid"):
        study.read_candidate(bad)


def test_an_unknown_candidate_is_named(study: ModuleType) -> None:
    with pytest.raises(study.StudyError, match="no patch named nope"):
        study.candidates(["nope"])


def test_the_vendored_tree_becomes_a_repository(study: ModuleType, tmp_path: Path) -> None:
    src = tmp_path / "llama.cpp"
    (src / "ggml").mkdir(parents=True)
    (src / "ggml" / "a.c").write_text("int a;\n")
    # what the sdist ships: a submodule link to a folder it does not have
    (src / ".git").write_text("gitdir: ../../.git/modules/vendor/llama.cpp\n")
    study.make_repository(src)
    head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], text=True,
                          capture_output=True, check=True).stdout.strip()
    assert len(head) == 40
    status = subprocess.run(["git", "-C", str(src), "status", "--porcelain"], text=True,
                            capture_output=True, check=True).stdout
    assert status == ""
    study.make_repository(src)  # a second call keeps the commit
    again = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], text=True,
                           capture_output=True, check=True).stdout.strip()
    assert again == head


def _archive(path: Path, names: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in names.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_unpack_takes_the_vendored_folder(study: ModuleType, tmp_path: Path) -> None:
    archive = tmp_path / "pkg-1.0.tar.gz"
    _archive(archive, {"pkg-1.0/setup.py": b"", "pkg-1.0/vendor/llama.cpp/CMakeLists.txt": b"x"})
    dest = tmp_path / "out" / "llama.cpp"
    study.unpack(archive, "vendor/llama.cpp", dest)
    assert (dest / "CMakeLists.txt").read_text() == "x"
    assert not (tmp_path / "out" / "llama.cpp.tmp").exists()


def test_unpack_refuses_an_archive_without_the_folder(study: ModuleType, tmp_path: Path) -> None:
    archive = tmp_path / "pkg-1.0.tar.gz"
    _archive(archive, {"pkg-1.0/setup.py": b""})
    with pytest.raises(study.StudyError, match=r"vendor/llama\.cpp"):
        study.unpack(archive, "vendor/llama.cpp", tmp_path / "llama.cpp")


def test_paired_effect_is_percent_with_an_interval(study: ModuleType) -> None:
    inc = [100.0, 102.0, 98.0, 101.0, 99.0, 100.5, 99.5, 100.0]
    wiggle = [0.2, -0.3, 0.1, 0.0, -0.1, 0.3, -0.2, 0.0]
    faster = [a * 1.05 * (1 + w / 100) for a, w in zip(inc, wiggle, strict=True)]
    e = study.paired_effect(inc, faster)
    assert e.n == 8
    assert e.mean == pytest.approx(5.0, abs=0.1)
    assert 0 < e.low < 5.0 < e.high
    same = [a * (1 + w / 100) for a, w in zip(inc, wiggle, strict=True)]
    z = study.paired_effect(inc, same)
    assert z.low < 0 < z.high
    slower = study.paired_effect(faster, inc)  # positive means better: a loss is negative
    assert slower.high < 0
