"""`pipeline.globs` is Go's `path.Match`, in linear time: Go's own test table, and no backtracking."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.globs import GlobError, check_glob, glob_match

# Go's src/path/match_test.go table (pattern, name, matched; None: ErrBadPattern).
GO_TABLE: list[tuple[str, str, bool | None]] = [
    ("abc", "abc", True),
    ("*", "abc", True),
    ("*c", "abc", True),
    ("a*", "a", True),
    ("a*", "abc", True),
    ("a*", "ab/c", False),
    ("a*/b", "abc/b", True),
    ("a*/b", "a/c/b", False),
    ("a*b*c*d*e*/f", "axbxcxdxe/f", True),
    ("a*b*c*d*e*/f", "axbxcxdxexxx/f", True),
    ("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", False),
    ("a*b*c*d*e*/f", "axbxcxdxexxx/fff", False),
    ("a*b?c*x", "abxbbxdbxebxczzx", True),
    ("a*b?c*x", "abxbbxdbxebxczzy", False),
    ("ab[c]", "abc", True),
    ("ab[b-d]", "abc", True),
    ("ab[e-g]", "abc", False),
    ("ab[^c]", "abc", False),
    ("ab[^b-d]", "abc", False),
    ("ab[^e-g]", "abc", True),
    ("a\\*b", "a*b", True),
    ("a\\*b", "ab", False),
    ("a?b", "a☺b", True),
    ("a[^a]b", "a☺b", True),
    ("a???b", "a☺b", False),
    ("a[^a][^a][^a]b", "a☺b", False),
    ("[a-ζ]*", "α", True),  # noqa: RUF001 (Go's own case)
    ("*[a-ζ]", "A", False),
    ("a?b", "a/b", False),
    ("a*b", "a/b", False),
    ("[\\]a]", "]", True),
    ("[\\-]", "-", True),
    ("[x\\-]", "x", True),
    ("[x\\-]", "-", True),
    ("[x\\-]", "z", False),
    ("[\\-x]", "x", True),
    ("[\\-x]", "-", True),
    ("[\\-x]", "a", False),
    ("[]a]", "]", None),
    ("[-]", "-", None),
    ("[x-]", "x", None),
    ("[x-]", "-", None),
    ("[x-]", "z", None),
    ("[-x]", "x", None),
    ("[-x]", "-", None),
    ("[-x]", "a", None),
    ("\\", "a", None),
    ("[a-b-c]", "a", None),
    ("[", "a", None),
    ("[^", "a", None),
    ("[^bc", "a", None),
    ("a[", "a", None),
    ("a[", "ab", None),
    ("a[", "x", None),
    ("a/b[", "x", None),
    ("*x", "xxx", True),
]


@pytest.mark.parametrize(("pattern", "name", "matched"), GO_TABLE)
def test_go_path_match_table(pattern: str, name: str, matched: bool | None) -> None:
    if matched is None:
        with pytest.raises(GlobError):
            glob_match(pattern, name)
        with pytest.raises(GlobError):
            check_glob(pattern)
    else:
        assert glob_match(pattern, name) is matched


def _comparisons(pattern: str, name: str) -> int:
    """How many characters of `name` the matcher reads (counted through a str subclass)."""
    reads = 0

    class Counting(str):
        __slots__ = ()

        def __getitem__(self, index: object) -> str:
            nonlocal reads
            reads += 1
            return str.__getitem__(self, index)  # type: ignore[index]

    glob_match(pattern, Counting(name))
    return reads


def test_the_issue_27_stopper_takes_linear_steps() -> None:
    """`*a*a*a*a*a*a*a*a*a*b` against 40 `a`s took 34 s as a regular expression; here it reads each
    character a bounded number of times."""
    pattern = "*a*a*a*a*a*a*a*a*a*b"
    name = "a" * 40
    assert glob_match(pattern, name) is False
    assert _comparisons(pattern, name) <= len(pattern) * (len(name) + 1)
    longer = "a" * 4000
    assert glob_match(pattern, longer) is False
    assert _comparisons(pattern, longer) <= len(pattern) * (len(longer) + 1)


@given(st.text(alphabet="ab*?/", max_size=12), st.text(alphabet="ab/", max_size=12))
def test_bounded_for_any_pattern(pattern: str, name: str) -> None:
    glob_match(pattern, name)
    assert _comparisons(pattern, name) <= (len(pattern) + 1) * (len(name) + 1)
