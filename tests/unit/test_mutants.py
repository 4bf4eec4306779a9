"""The mutation operators behind `make mutation`: each site found, applied, and named stably."""

from __future__ import annotations

import ast

import pytest

from tests.mutation import __main__ as runner
from tests.mutation.__main__ import ModuleSpec, stale_entries
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


TWO_FUNCTIONS = """
class Gate:
    def open(self, a: int) -> bool:
        return a > 0

    def close(self, a: int) -> bool:
        if a > 0:
            return False
        return a > 0
"""


def ids(source: str) -> dict[str, int]:
    return {m.id: m.line for m in find_mutants(source)}


def test_ids_name_the_function_the_operator_and_the_mutated_text() -> None:
    found = ids(TWO_FUNCTIONS)
    assert "Gate.open:negate-compare#0:a > 0@0" in found
    assert "Gate.open:return-none#0:return a > 0@0" in found
    # The same text twice in one function: told apart by occurrence, in source order.
    assert found["Gate.close:boundary#0:a > 0@0"] < found["Gate.close:boundary#0:a > 0@1"]
    assert "Gate.close:boundary#0:a > 0@2" not in found


def test_ids_survive_edits_elsewhere_in_the_module() -> None:
    before = ids(TWO_FUNCTIONS)
    moved = "import os\n\n\nLIMIT = 3\n" + TWO_FUNCTIONS.replace(
        "return a > 0\n\n", "b = a\n        return a > 0\n\n"
    )
    after = ids(moved)
    assert set(before) <= set(after), "an unrelated edit must not change any id"
    assert all(after[i] > before[i] for i in before), "every line moved, yet no id changed"
    assert before, "the module has mutants"


def test_an_edit_of_the_mutated_code_retires_its_id() -> None:
    edited = ids(
        TWO_FUNCTIONS.replace(
            "    def open(self, a: int) -> bool:\n        return a > 0",
            "    def open(self, a: int) -> bool:\n        return a >= 0",
        )
    )
    assert "Gate.open:negate-compare#0:a > 0@0" not in edited
    assert "Gate.open:negate-compare#0:a >= 0@0" in edited
    assert "Gate.close:negate-compare#0:a > 0@1" in edited


def test_applying_the_second_occurrence_changes_only_that_one() -> None:
    mutant = next(m for m in find_mutants(TWO_FUNCTIONS) if m.id == "Gate.close:negate-compare#0:a > 0@1")
    mutated = apply_mutant(TWO_FUNCTIONS, mutant)
    assert mutated.count("a <= 0") == 1
    assert mutated.index("if a > 0:") < mutated.index("return a <= 0")


def test_a_constant_is_named_with_what_holds_it() -> None:
    source = "def f(x: int, limit: int = 4) -> int:\n    return x * 60 if x else 60\n"
    found = ids(source)
    assert "f:constant#0:limit=4@0" in found
    assert "f:constant#1:x * 60 if x else 60@0" in found
    assert "f:constant#1:x * 60@0" in found


def test_an_equivalence_entry_that_matches_no_mutant_is_stale() -> None:
    spec = ModuleSpec("pipeline/lag/status.py", ("tests/lag/test_status.py",), 90.0, None, 150)
    real = spec.mutants()[0].id
    equivalent = {
        spec.path: {real: "kept", "partition_status:constant#0:offsets[7]@0": "gone"},
        "pipeline/nowhere.py": {real: "no such module"},
    }
    stale = stale_entries([spec], equivalent)
    assert stale == [
        "pipeline/lag/status.py partition_status:constant#0:offsets[7]@0 (matches no mutant of the module)",
        f"pipeline/nowhere.py {real} (the module is not in modules.toml)",
    ]
    assert stale_entries([spec], {spec.path: {real: "kept"}}) == []


def test_the_runner_refuses_to_run_with_a_stale_entry(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = {"pipeline/lag/status.py": {"partition_status:constant#0:offsets[7]@0": "the code changed"}}
    monkeypatch.setattr(runner, "load_equivalent", lambda: stale)
    monkeypatch.setattr(runner, "run_module", lambda *args: pytest.fail("ran mutants despite a stale entry"))
    assert runner.main(["--module", "lag/status"]) == 1
    err = capsys.readouterr().err
    assert "stale equivalence entry pipeline/lag/status.py partition_status:constant#0:offsets[7]@0" in err
