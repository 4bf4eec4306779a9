"""The mutation operators behind `make mutation`: each site found, applied, and named stably."""

from __future__ import annotations

import ast

import pytest

from tests.mutation.mutants import apply_mutant, find_mutants

SOURCE = '''
def decide(a: int, b: int, flag: bool) -> int | None:
    """Docstrings are never mutated."""
    total = a + 2
    if a < b and not flag:
        return total
    return None
'''


def by_operator(operator: str) -> list[str]:
    return [m.description for m in find_mutants(SOURCE) if m.operator == operator]


def test_every_operator_finds_its_sites() -> None:
    assert by_operator("negate-compare") == ["Lt -> GtE"]
    assert by_operator("boundary") == ["Lt -> LtE"]
    assert by_operator("and-or") == ["And -> Or"]
    assert by_operator("constant") == ["2 -> 3", "2 -> 1"]
    assert by_operator("negate-condition") == ["condition -> not condition"]
    assert by_operator("drop-not") == ["not x -> x"]
    # `return None` is left alone: mutating it to `return None` would be the original.
    assert by_operator("return-none") == ["return x -> return None"]
    assert by_operator("delete-statement") == ["Assign -> pass"]


@pytest.mark.parametrize(
    ("operator", "expected"),
    [
        ("negate-compare", "if a >= b and (not flag):"),
        ("boundary", "if a <= b and (not flag):"),
        ("and-or", "if a < b or not flag:"),
        ("drop-not", "if a < b and flag:"),
        ("negate-condition", "if not (a < b and (not flag)):"),
    ],
)
def test_applying_a_mutant_changes_exactly_that_site(operator: str, expected: str) -> None:
    mutant = next(m for m in find_mutants(SOURCE) if m.operator == operator)
    mutated = apply_mutant(SOURCE, mutant)
    assert expected in mutated
    assert ast.dump(ast.parse(mutated)) != ast.dump(ast.parse(SOURCE))
    assert '"""Docstrings are never mutated."""' in mutated


def test_ids_are_stable_and_unique() -> None:
    first = [m.id for m in find_mutants(SOURCE)]
    assert first == [m.id for m in find_mutants(SOURCE)]
    assert len(first) == len(set(first))


def test_function_filter_limits_the_sites() -> None:
    source = SOURCE + "\ndef other(x: int) -> bool:\n    return x > 1\n"
    only_other = find_mutants(source, frozenset({"other"}))
    assert {m.line for m in only_other} == {10}
    assert {m.operator for m in only_other} == {"negate-compare", "boundary", "constant", "return-none"}
