"""Property and fuzz tests: bad patches, paths and whole-CLI input give a clear AssayError.

Never a traceback: every input either passes or raises (or exits with) assay's own error.
``FUZZED`` counts the inputs tried; it is printed at the end of the module (``pytest -s``).
"""

from __future__ import annotations

import os
import traceback
from collections import Counter
from pathlib import Path, PurePosixPath

import pytest
from hardening_kit import ListProposer, Repo, make_repo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import assay.api as api
from assay.cli.app import app
from assay.config.spec import parse
from assay.errors import AssayError, PatchError
from assay.model import BlockState, Candidate
from assay.repo.workspace import check_scope, patch_paths

FUZZED: Counter[str] = Counter()
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))

TARGET = parse("""
[metric]
name = "speed"
[commands]
bench = "python bench.py"
[scope]
editable = ["work.py", "src/**"]
protected = ["bench.py", "data/**"]
""", Path("/nonexistent/repo"))

segment = st.one_of(
    st.sampled_from(["..", ".", ".git", ".assay", "src", "data", "work.py", "bench.py", "",
                     "a b", "~", "C:", "\\..", "..\\x", "%2e%2e", "\u2025", "src\t", "x\x00y"]),
    st.text(min_size=1, max_size=8))
paths = st.builds(lambda parts, lead: lead + "/".join(parts),
                  st.lists(segment, min_size=1, max_size=5),
                  st.sampled_from(["", "/", "./", "a/", "b/", "//", "C:\\"]))

HEADER_LINES = ["diff --git a/{p} b/{q}", "--- a/{p}", "+++ b/{q}", "--- {p}", "+++ {q}",
                "--- /dev/null", "+++ /dev/null", "rename from {p}", "rename to {q}",
                "copy from {p}", "copy to {q}", "new file mode 100644", "new file mode 120000",
                "old mode 100644", "new mode 120000", "deleted file mode 100644",
                "similarity index 90%", "@@ -1,3 +1,4 @@", "@@ -0,0 +1 @@", "+x = 1",
                "-x = 0", " context", "\\ No newline at end of file", "index abc..def 100644",
                "Binary files a/{p} and b/{q} differ", "GIT binary patch", ""]

patch_text = st.builds(
    lambda lines, ps: "\n".join(ln.format(p=ps[i % len(ps)], q=ps[(i + 1) % len(ps)])
                                for i, ln in enumerate(lines)),
    st.lists(st.sampled_from(HEADER_LINES), min_size=1, max_size=14),
    st.lists(paths, min_size=1, max_size=3))


def _bad_part(p: str) -> bool:
    parts = PurePosixPath(p).parts
    return p.startswith("/") or ".." in parts or (parts[:1] in ((".git",), (".assay",)))


@SETTINGS
@given(patch_text)
def test_patch_paths_only_raises_patch_error(text: str) -> None:
    FUZZED["patch structures"] += 1
    try:
        info = patch_paths(text)
    except PatchError as exc:
        assert str(exc)
        return
    for p in info.paths:  # whatever passed is a safe relative path
        assert not _bad_part(p), p


@SETTINGS
@given(st.text(max_size=400))
def test_arbitrary_text_as_a_patch(text: str) -> None:
    FUZZED["random patch text"] += 1
    try:
        for p in check_scope(text, TARGET):
            assert TARGET.is_editable(p) and not TARGET.is_protected(p) and not _bad_part(p)
    except PatchError:
        pass


@SETTINGS
@given(paths, st.sampled_from(["+++ b/{}", "--- a/{}", "rename to {}", "copy from {}",
                               "diff --git a/work.py b/{}"]))
def test_every_path_is_checked(path: str, template: str) -> None:
    FUZZED["paths"] += 1
    line = template.format(path)
    try:
        accepted = check_scope(line + "\n", TARGET)
    except PatchError as exc:
        assert "patch" in str(exc) or "path" in str(exc)
        return
    for p in accepted:
        assert TARGET.is_editable(p) and not TARGET.is_protected(p) and not _bad_part(p), p


@pytest.fixture(scope="module")
def fuzz_repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    return make_repo(tmp_path_factory.mktemp("fuzz"))


def test_submitting_fuzzed_candidates_never_crashes_the_loop(fuzz_repo: Repo) -> None:
    """Through the loop's own validation: every bad candidate is recorded as invalid."""
    seen: list[str] = []

    @settings(max_examples=150, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(patch_text, st.dictionaries(st.text(max_size=6), st.integers(), max_size=2))
    def one(text: str, params: dict[str, int]) -> None:
        FUZZED["candidates through the loop"] += 1
        cand = Candidate(base_commit=loop.incumbent.commit, patch=text, params=params,
                         hypothesis="fuzz", proposer="fuzz")
        exp = loop.submit_candidate(cand)
        seen.append(exp.state.value)
        if exp.state.value == "queued":  # keep the queue empty: nothing runs here
            for b in loop.journal.blocks(exp.id, states=(BlockState.QUEUED,)):
                loop.journal.cancel_block(b.id, "fuzz")

    with api.session(api.load(fuzz_repo.root), proposer=ListProposer([])) as loop:
        loop.start()
        one()
        loop.hooks.join()
    assert seen and "invalid" in seen


def _no_traceback(result: object, what: str) -> None:
    exc = getattr(result, "exception", None)
    out = getattr(result, "output", "")
    assert exc is None or isinstance(exc, SystemExit), (
        f"{what}: {''.join(traceback.format_exception(exc))}")
    assert "Traceback" not in out, f"{what}: {out}"


@SETTINGS
@given(st.one_of(st.text(max_size=300), st.binary(max_size=300).map(
    lambda b: b.decode("latin-1")), st.builds(
    lambda a, b, c: f"[metric]\nname = {a}\n[commands]\nbench = {b}\n[scope]\neditable = {c}\n",
    st.sampled_from(['"x"', "1", '""', "[]", "true", '"speed"']),
    st.sampled_from(['"python b.py"', '""', "3", "[1]", '"x"']),
    st.sampled_from(['["*.py"]', "[]", '"*.py"', "[1]", '["/abs"]', '["../x"]']))))
def test_cli_on_a_fuzzed_config_exits_cleanly(tmp_path_factory: pytest.TempPathFactory,
                                              text: str) -> None:
    FUZZED["CLI invocations on fuzzed assay.toml"] += 1
    root = tmp_path_factory.mktemp("cfg")
    (root / "assay.toml").write_text(text, encoding="utf-8", errors="surrogateescape")
    for verb in (["run", "--budget", "1"], ["status"]):
        r = CliRunner().invoke(app, [*verb, "-C", str(root)])
        _no_traceback(r, f"{verb} on {text!r}")
        if r.exit_code != 0:
            assert r.exit_code == 2 and "error" in r.output.lower(), r.output


def _bad_inputs(repo: Repo, tmp: Path) -> list[tuple[str, list[str], str]]:
    garbage = tmp / "garbage"
    garbage.mkdir()
    (garbage / "assay.toml").write_text((repo.root / "assay.toml").read_text())
    corrupt = make_repo(tmp / "corrupt")
    (corrupt.root / ".assay").mkdir()
    (corrupt.journal).write_bytes(os.urandom(4096))
    binary = make_repo(tmp / "binary")
    (binary.root / "assay.toml").write_bytes(b"[metric]\nname = \"\xff\xfe\x80\"\n")
    from assay.journal.store import Journal

    Journal.open(repo.journal).close()  # an empty journal: no experiments yet
    r = str(repo.root)
    return [
        ("status before any run", ["status", "-C", str(garbage)], "no journal"),
        ("a config that is not UTF-8", ["run", "-C", str(binary.root)], "utf-8"),
        ("a missing folder", ["run", "-C", str(tmp / "nope")], "no such file"),
        ("not a git repository", ["run", "-C", str(garbage), "--budget", "1"], "git"),
        ("a corrupt journal (run)", ["run", "-C", str(corrupt.root), "--budget", "1"],
         "journal"),
        ("a corrupt journal (status)", ["status", "-C", str(corrupt.root)], "journal"),
        ("a corrupt journal (log)", ["log", "-C", str(corrupt.root)], "journal"),
        ("an unknown experiment", ["show", "e9999", "-C", r], "e9999"),
        ("a garbage experiment id", ["show", "../../etc", "-C", r], "no experiment"),
        ("an unknown export format", ["export", "xml", "-C", r], "error"),
        ("an unknown proposer", ["run", "-C", r, "--proposer", "magic"], "proposer"),
        ("zero slots", ["run", "-C", r, "--slots", "0", "--budget", "1"], "slots"),
        ("a missing --config file", ["run", "-C", r, "--config", "nope.toml"], "no such file"),
        ("a config that is a folder", ["run", "-C", r, "--config", "data"], "error"),
    ]


def test_cli_on_bad_input_says_what_is_wrong(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ok")
    problems = []
    for name, args, words in _bad_inputs(repo, tmp_path):
        FUZZED["CLI invocations on bad input"] += 1
        res = CliRunner().invoke(app, args)
        try:
            _no_traceback(res, name)
            assert res.exit_code == 2, f"exit {res.exit_code}"
            assert words.lower() in res.output.lower(), res.output[-300:]
        except AssertionError as exc:
            problems.append(f"{name}: {exc}")
    assert not problems, "\n\n".join(problems)


def test_api_errors_are_assay_errors(tmp_path: Path) -> None:
    with pytest.raises(AssayError):
        api.run(tmp_path / "missing", budget=1)
    with pytest.raises(AssayError):
        api.status(tmp_path)


def teardown_module() -> None:
    print(f"\nfuzzed inputs: {sum(FUZZED.values())} ({dict(FUZZED)})")
