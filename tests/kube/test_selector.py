"""Label selectors against vectors taken from Kubernetes' own parser behaviour."""

from __future__ import annotations

import pytest

from pipeline.kube.selector import SelectorError, parse_selector

VALID = [
    # (selector, labels, matches)
    ("", {}, True),
    ("", {"a": "b"}, True),
    ("x=a", {"x": "a"}, True),
    ("x=a", {"x": "b"}, False),
    ("x=a", {}, False),
    ("x==a", {"x": "a"}, True),
    ("x!=a", {"x": "b"}, True),
    ("x!=a", {}, True),
    ("x!=a", {"x": "a"}, False),
    ("x in (a,b)", {"x": "b"}, True),
    ("x in (a,b)", {"x": "c"}, False),
    ("x in (a,b)", {}, False),
    ("x notin (a,b)", {}, True),
    ("x notin (a,b)", {"x": "a"}, False),
    ("x notin (a,b)", {"x": "c"}, True),
    ("x", {"x": ""}, True),
    ("x", {}, False),
    ("!x", {}, True),
    ("!x", {"x": "a"}, False),
    ("x>1", {"x": "2"}, True),
    ("x>1", {"x": "1"}, False),
    ("x<1", {"x": "0"}, True),
    ("x>1", {"x": "abc"}, False),
    ("x>1", {}, False),
    ("x=", {"x": ""}, True),
    ("x=", {"x": "a"}, False),
    ("x in (a,)", {"x": ""}, True),
    ("x in ()", {"x": ""}, True),
    ("x in (,a)", {"x": ""}, True),
    ("x in (foo,,baz),y,z notin ()", {"x": "", "y": "1"}, True),
    (" x = a , y in ( b ) ", {"x": "a", "y": "b"}, True),
    ("x=a,y=b", {"x": "a"}, False),
    (
        "mutationlab.configbutler.ai/scenario=deletecollection",
        {"mutationlab.configbutler.ai/scenario": "deletecollection"},
        True,
    ),
    ("in in (in)", {"in": "in"}, True),
    ("x in (notin)", {"x": "notin"}, True),
    ("app.kubernetes.io/name notin (web)", {"app.kubernetes.io/name": "db"}, True),
]

INVALID = [
    "x=a=b",
    "x in (a",
    "x in a",
    "x in (a b)",
    "(x)",
    "x,",
    ",x",
    "x=a,",
    "!x=a",
    "x>a",
    "x>",
    "x>1.5",
    "x=-a",
    "x=" + "a" * 64,
    "a" * 64,
    "Pre.Fix/x=a",
    "/x=a",
    "a/b/c=d",
    "x=a b",
    "x!!=a",
    "x<=1",
    "x>-1",
    "x in (a))",
    "!",
    "x=(a)",
]


@pytest.mark.parametrize(("text", "labels", "expected"), VALID)
def test_valid_selector_vectors(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_selector(text).matches(labels) is expected


@pytest.mark.parametrize("text", INVALID)
def test_invalid_selector_vectors(text: str) -> None:
    with pytest.raises(SelectorError):
        parse_selector(text)


def test_qualified_key_limits() -> None:
    parse_selector("a" * 63 + "=b")
    parse_selector("example.com/" + "a" * 63)
    parse_selector("x=" + "v" * 63)
    with pytest.raises(SelectorError):
        parse_selector("b" * 254 + "/a")
