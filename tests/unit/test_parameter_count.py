"""The guard on long parameter lists in `pipeline/` (issue 31: value objects for the clumps).

A function may take at most `MAX_PARAMETERS` named parameters (`self`/`cls` and `*args`/`**kwargs`
collectors not counted). The one exception is the constructor of a public class whose parameters
beyond that many are keyword-only: every caller then names what it passes. Anything longer takes
a value object for the parameters that travel together (a log position, a stream identity, a small
NamedTuple of related settings).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pipeline

MAX_PARAMETERS = 7
PIPELINE = Path(pipeline.__file__).parent


def _named(args: ast.arguments) -> tuple[int, int]:
    """(positional, keyword-only) named parameters, without a leading `self` or `cls`."""
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    if positional and positional[0] in ("self", "cls"):
        positional = positional[1:]
    return len(positional), len(args.kwonlyargs)


def violations(source: str, where: str) -> list[str]:
    """`where:line name (n parameters)` for each function of `source` that breaks the rule."""
    found: list[str] = []

    def visit(node: ast.AST, public_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, not child.name.startswith("_"))
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                positional, keyword_only = _named(child.args)
                total = positional + keyword_only
                keyworded_constructor = (
                    child.name == "__init__" and public_class and positional <= MAX_PARAMETERS
                )
                if total > MAX_PARAMETERS and not keyworded_constructor:
                    found.append(f"{where}:{child.lineno} {child.name} ({total} parameters)")
                visit(child, False)
            else:
                visit(child, public_class)

    visit(ast.parse(source), False)
    return found


def test_no_function_in_pipeline_takes_more_than_seven_parameters() -> None:
    found = [
        problem
        for path in sorted(PIPELINE.rglob("*.py"))
        for problem in violations(path.read_text(encoding="utf-8"), str(path.relative_to(PIPELINE.parent)))
    ]
    assert found == [], "take a value object for the parameters that travel together:\n" + "\n".join(found)


def test_the_guard_flags_a_long_function_and_a_positional_constructor() -> None:
    source = """
def eight(a, b, c, d, e, f, g, h): ...
class Public:
    def __init__(self, a, b, c, d, e, f, g, h): ...
    def method(self, a, b, c, d, e, f, g, *, h): ...
class _Private:
    def __init__(self, a, *, b, c, d, e, f, g, h): ...
"""
    assert violations(source, "m.py") == [
        "m.py:2 eight (8 parameters)",
        "m.py:4 __init__ (8 parameters)",
        "m.py:5 method (8 parameters)",
        "m.py:7 __init__ (8 parameters)",
    ]


def test_the_guard_allows_seven_parameters_and_keyworded_public_constructors() -> None:
    source = """
def seven(a, b, c, d, e, f, g, *args, **kwargs): ...
class Public:
    def __init__(self, a, b, c, d, e, f, g, *, h, i, j): ...
    @classmethod
    def of(cls, a, b, c, d, e, f, g): ...
"""
    assert violations(source, "m.py") == []
