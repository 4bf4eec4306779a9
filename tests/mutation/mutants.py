"""Mutation operators: the small, plausible slips a test suite must notice.

Each operator finds *sites* in a module's AST and can apply one of them to a fresh tree. A site is
named by its operator, line, column and (for operators with several outcomes) the variant, so the
same source always yields the same mutant ids and `equivalent.toml` can refer to them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Mutant", "apply_mutant", "find_mutants"]

COMPARE_SWAPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
# A boundary slip (`<` written for `<=`) is the commonest real bug; it gets its own operator.
BOUNDARY_SWAPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
}


@dataclass(frozen=True, slots=True)
class Mutant:
    """One mutation of one module: `id` is stable for unchanged source."""

    operator: str
    line: int
    col: int
    variant: int
    description: str

    @property
    def id(self) -> str:
        return f"{self.operator}@{self.line}:{self.col}#{self.variant}"


def _docstring_nodes(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings: never mutated."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0]))
    return found


def _in_functions(tree: ast.Module, functions: frozenset[str] | None) -> Iterator[ast.AST]:
    """Every node of the module, or only those inside the named functions/methods."""
    if functions is None:
        yield from ast.walk(tree)
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in functions:
            yield from ast.walk(node)


def _sites(tree: ast.Module, functions: frozenset[str] | None) -> Iterator[tuple[Mutant, ast.AST]]:
    docstrings = _docstring_nodes(tree)
    for node in _in_functions(tree, functions):
        where = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
        if isinstance(node, ast.Compare):
            for index, op in enumerate(node.ops):
                swap = COMPARE_SWAPS.get(type(op))
                if swap is not None:
                    description = f"{type(op).__name__} -> {swap.__name__}"
                    yield Mutant("negate-compare", *where, index, description), node
                boundary = BOUNDARY_SWAPS.get(type(op))
                if boundary is not None:
                    yield (
                        Mutant("boundary", *where, index, f"{type(op).__name__} -> {boundary.__name__}"),
                        node,
                    )
        elif isinstance(node, ast.BoolOp):
            other = "Or" if isinstance(node.op, ast.And) else "And"
            yield Mutant("and-or", *where, 0, f"{type(node.op).__name__} -> {other}"), node
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            yield Mutant("constant", *where, 0, f"{node.value} -> {node.value + 1}"), node
            yield Mutant("constant", *where, 1, f"{node.value} -> {node.value - 1}"), node
        elif isinstance(node, ast.If | ast.While | ast.IfExp):
            yield Mutant("negate-condition", *where, 0, "condition -> not condition"), node
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield Mutant("drop-not", *where, 0, "not x -> x"), node
        elif isinstance(node, ast.Return) and node.value is not None:
            if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                yield Mutant("return-none", *where, 0, "return x -> return None"), node
        elif (
            isinstance(node, ast.Expr | ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete)
            and id(node) not in docstrings
        ):
            yield Mutant("delete-statement", *where, 0, f"{type(node).__name__} -> pass"), node


def find_mutants(source: str, functions: frozenset[str] | None = None) -> list[Mutant]:
    """Every mutant of `source` (optionally only inside the named functions), in source order."""
    tree = ast.parse(source)
    unique: dict[str, Mutant] = {}
    for mutant, _ in _sites(tree, functions):
        unique.setdefault(mutant.id, mutant)
    return sorted(unique.values(), key=lambda m: (m.line, m.col, m.operator, m.variant))


class _Apply(ast.NodeTransformer):
    def __init__(self, mutant: Mutant, target: ast.AST) -> None:
        self.mutant = mutant
        self.target = target
        self.applied = False

    def visit(self, node: ast.AST) -> ast.AST:
        if node is not self.target:
            visited: ast.AST = super().visit(node)
            return visited
        self.applied = True
        mutated: ast.AST = self._mutate(node)
        return mutated

    def _mutate(self, node: ast.AST) -> ast.AST:
        operator, variant = self.mutant.operator, self.mutant.variant
        if operator in ("negate-compare", "boundary") and isinstance(node, ast.Compare):
            table = COMPARE_SWAPS if operator == "negate-compare" else BOUNDARY_SWAPS
            node.ops[variant] = table[type(node.ops[variant])]()
        elif operator == "and-or" and isinstance(node, ast.BoolOp):
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        elif operator == "constant" and isinstance(node, ast.Constant) and type(node.value) is int:
            node.value = int(node.value) + (1 if variant == 0 else -1)
        elif operator == "negate-condition" and isinstance(node, ast.If | ast.While | ast.IfExp):
            node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)
        elif operator == "drop-not" and isinstance(node, ast.UnaryOp):
            return node.operand
        elif operator == "return-none" and isinstance(node, ast.Return):
            node.value = ast.Constant(value=None)
        elif operator == "delete-statement":
            return ast.Pass()
        return node


def apply_mutant(source: str, mutant: Mutant, functions: frozenset[str] | None = None) -> str:
    """The source of `source` with `mutant` applied (formatting normalised by `ast.unparse`)."""
    tree = ast.parse(source)
    for candidate, node in _sites(tree, functions):
        if candidate.id == mutant.id:
            transformer = _Apply(candidate, node)
            mutated = transformer.visit(tree)
            if not transformer.applied:
                break
            return ast.unparse(ast.fix_missing_locations(mutated))
    raise LookupError(f"mutant {mutant.id} not found")
