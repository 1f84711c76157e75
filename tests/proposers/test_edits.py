"""SEARCH/REPLACE parsing, applying and diffing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assay.proposers.edits import (
    EditBlock,
    EditError,
    apply_blocks,
    normalize_path,
    parse_reply,
    unified_diff,
)

SRC = "def f(x):\n    y = x + 1\n    return y\n\n\ndef g(x):\n    return x * 2\n"


def files(**kw: str) -> dict[str, str]:
    return {k.replace("__", "/").replace("_py", ".py"): v for k, v in kw.items()}


def test_parse_aider_style_with_fences_and_headings() -> None:
    reply = """Some thinking first.

HYPOTHESIS: **double the step**

### `src/a.py`
```python
<<<<<<< SEARCH
    y = x + 1
=======
    y = x + 2
>>>>>>> REPLACE
```

```python
<<<<<<< SEARCH
    return x * 2
=======
    return x << 1
>>>>>>> REPLACE
```
"""
    parsed = parse_reply(reply)
    assert parsed.hypothesis == "double the step"
    assert [b.path for b in parsed.blocks] == ["src/a.py", "src/a.py"]
    assert parsed.blocks[0].search == "    y = x + 1\n"
    assert parsed.blocks[1].replace == "    return x << 1\n"


@pytest.mark.parametrize(("reply", "kind", "words"), [
    ("HYPOTHESIS: x\nno blocks here", "malformed", "no edit block"),
    ("a.py\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n", "malformed", "HYPOTHESIS"),
    ("HYPOTHESIS: x\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n", "malformed",
     "no file path"),
    ("HYPOTHESIS: x\na.py\n<<<<<<< SEARCH\nx\n", "unterminated", "ends inside the SEARCH"),
    ("HYPOTHESIS: x\na.py\n<<<<<<< SEARCH\nx\n=======\ny\n", "unterminated",
     "ends inside the REPLACE"),
    ("HYPOTHESIS: x\na.py\n<<<<<<< SEARCH\nx\n>>>>>>> REPLACE\n", "malformed", "no '======='"),
    ("HYPOTHESIS: x\na.py\n=======\n", "malformed", "outside an edit block"),
    ("HYPOTHESIS: x\na.py\n<<<<<<< FILE\nx\n", "unterminated", "never closed"),
])
def test_malformed_replies(reply: str, kind: str, words: str) -> None:
    with pytest.raises(EditError, match=words) as info:
        parse_reply(reply)
    assert info.value.kind == kind


def test_no_more_ideas() -> None:
    assert parse_reply("NO_MORE_IDEAS\n").no_more_ideas


def read_from(d: dict[str, str]):  # type: ignore[no-untyped-def]
    return lambda p: d.get(p)


def test_exact_match_and_sequential_blocks() -> None:
    blocks = [EditBlock("a.py", "    y = x + 1\n", "    y = x + 2\n"),
              EditBlock("a.py", "    y = x + 2\n    return y\n", "    return x + 2\n", index=2)]
    applied = apply_blocks(blocks, read_from({"a.py": SRC}))
    assert applied.changes["a.py"][1] == SRC.replace("    y = x + 1\n    return y\n",
                                                      "    return x + 2\n")


def test_trailing_whitespace_and_reindent_tolerance() -> None:
    # the model dropped one level of indentation: the replacement is re-indented
    blocks = [EditBlock("a.py", "y = x + 1  \nreturn y\n", "z = x + 1\nreturn z\n")]
    new = apply_blocks(blocks, read_from({"a.py": SRC})).changes["a.py"][1]
    assert "    z = x + 1\n    return z\n" in new


def test_ambiguous_and_missing_matches_name_lines() -> None:
    text = "a = 1\nb = 2\na = 1\n"
    with pytest.raises(EditError, match=r"matches 2 places \(lines 1, 3\)") as info:
        apply_blocks([EditBlock("a.py", "a = 1\n", "a = 3\n")], read_from({"a.py": text}))
    assert info.value.kind == "ambiguous"
    with pytest.raises(EditError, match=r"closest lines in a.py are:\n```\n") as info:
        apply_blocks([EditBlock("a.py", "b = 2\nc = 3\n", "b = 4\n")],
                     read_from({"a.py": text}))
    assert info.value.kind == "no_match"
    with pytest.raises(EditError, match="No line of it appears"):
        apply_blocks([EditBlock("a.py", "zzz\n", "b = 4\n")], read_from({"a.py": text}))


def test_every_failing_block_is_reported() -> None:
    blocks = [EditBlock("a.py", "nope\n", "x\n", index=1),
              EditBlock("a.py", "    return y\n", "    return -y\n", index=2),
              EditBlock("b.py", "also nope\n", "x\n", index=3)]
    with pytest.raises(EditError) as info:
        apply_blocks(blocks, read_from({"a.py": SRC}))
    msg = str(info.value)
    assert "edit block 1 (a.py)" in msg and "edit block 3 (b.py)" in msg
    assert "edit block 2" not in msg and "does not exist" in msg


def test_create_and_whole_file_rules() -> None:
    applied = apply_blocks([EditBlock("new.py", "", "x = 1\n")], read_from({}))
    assert applied.changes["new.py"] == (None, "x = 1\n")
    with pytest.raises(EditError, match="SEARCH is empty but the file exists"):
        apply_blocks([EditBlock("a.py", "", "x\n")], read_from({"a.py": SRC}))
    with pytest.raises(EditError, match="at most 10 bytes") as info:
        apply_blocks([EditBlock("a.py", "", "x\n", "file")], read_from({"a.py": SRC}), 10)
    assert info.value.kind == "too_large"
    with pytest.raises(EditError, match="change nothing") as info:
        apply_blocks([EditBlock("a.py", "    y = x + 1\n", "    y = x + 1\n")],
                     read_from({"a.py": SRC}))
    assert info.value.kind == "no_change"


def test_crlf_and_missing_final_newline_are_preserved() -> None:
    crlf = "a = 1\r\nb = 2\r\n"
    new = apply_blocks([EditBlock("a.py", "b = 2\n", "b = 3\nc = 4\n")],
                       read_from({"a.py": crlf})).changes["a.py"][1]
    assert new == "a = 1\r\nb = 3\r\nc = 4\r\n"
    bare = "a = 1\nb = 2"
    new = apply_blocks([EditBlock("a.py", "a = 1\n", "a = 0\n")],
                       read_from({"a.py": bare})).changes["a.py"][1]
    assert new == "a = 0\nb = 2"
    formfeed = "a = 1\x0c\nb = 2\n"  # str.splitlines would split at \x0c
    new = apply_blocks([EditBlock("a.py", "b = 2\n", "b = 3\n")],
                       read_from({"a.py": formfeed})).changes["a.py"][1]
    assert new == "a = 1\x0c\nb = 3\n"


@pytest.mark.parametrize(("raw", "clean"), [
    ("src/a.py", "src/a.py"), ("./src//a.py", "src/a.py"), ("/etc/passwd", None),
    ("../x.py", None), ("src/../../x", None), (".git/config", None), ("C:/x.py", None),
    ("a\\b.py", None), ("", None),
])
def test_normalize_path(raw: str, clean: str | None) -> None:
    assert normalize_path(raw) == clean


def git_apply_result(tmp_path: Path, old: dict[str, str], patch: str) -> dict[str, str]:
    root = tmp_path
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    for p, t in old.items():
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        (root / p).write_bytes(t.encode())
    subprocess.run(["git", "apply", "-"], cwd=root, input=patch.encode(), check=True,
                   capture_output=True)
    return {p.relative_to(root).as_posix(): p.read_bytes().decode()
            for p in root.rglob("*") if p.is_file() and ".git" not in p.parts}


def test_diff_applies_exactly(tmp_path: Path) -> None:
    old = {"src/a.py": SRC, "b.txt": "x\r\ny"}
    changes = {"src/a.py": (SRC, SRC.replace("x * 2", "x + x")),
               "b.txt": ("x\r\ny", "x\r\nz"), "src/new.py": (None, "n = 1\n")}
    patch = unified_diff(changes)
    assert patch.count("diff --git") == 3
    assert git_apply_result(tmp_path, old, patch) == {p: new for p, (_, new) in changes.items()}


line = st.text(alphabet=st.sampled_from("ab =+x\t"), min_size=0, max_size=6)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(line, min_size=1, max_size=12), data=st.data())
def test_property_apply_then_diff_reproduces_the_edit(tmp_path: Path, lines: list[str],
                                                      data: st.DataObject) -> None:
    """Whatever unique block is replaced, git applies the diff to the same text."""
    text = "".join(f"{i}:{x}\n" for i, x in enumerate(lines))  # numbered: every line unique
    numbered = text.splitlines(keepends=True)
    i = data.draw(st.integers(0, len(numbered) - 1))
    j = data.draw(st.integers(i + 1, len(numbered)))
    repl = data.draw(st.lists(line, max_size=4))
    search = "".join(numbered[i:j])
    replace = "".join(f"new {x}\n" for x in repl)
    applied = apply_blocks([EditBlock("f.txt", search, replace)], read_from({"f.txt": text}))
    expected = "".join(numbered[:i]) + replace + "".join(numbered[j:])
    assert applied.changes["f.txt"][1] == expected
    work = tmp_path / f"w{abs(hash((text, i, j, replace)))}"
    work.mkdir()
    got = git_apply_result(work, {"f.txt": text}, unified_diff(applied.changes))
    assert got["f.txt"] == expected
