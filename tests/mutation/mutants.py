"""Mutation operators: the small, plausible slips a test suite must notice.

Each operator finds *sites* in a module's AST and can apply one of them to a fresh tree. A mutant's
id names where it is by what the code says, not by line: the enclosing function's qualified name,
the operator and variant, the mutated source text (normalised by `ast.unparse`) and, when that
text occurs more than once in the function, which occurrence. So an edit elsewhere in the module
(a line added above, another function changed) leaves the ids `equivalent.toml` pins unchanged,
while an edit of the mutated code itself retires its id (and the runner reports the entry stale).
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


MODULE_SCOPE = "<module>"
TEXT_CHARS = 100


@dataclass(frozen=True, slots=True)
class Mutant:
    """One mutation of one module.

    `id` depends only on the enclosing function (`scope`), the operator and variant, the mutated
    source `text` and its `occurrence` among identical sites of that function: it survives edits
    anywhere else. `line` and `col` only say where to look.
    """

    operator: str
    variant: int
    scope: str
    text: str
    occurrence: int
    line: int
    col: int
    description: str

    @property
    def id(self) -> str:
        return f"{self.scope}:{self.operator}#{self.variant}:{self.text}@{self.occurrence}"


@dataclass(frozen=True, slots=True)
class _Site:
    """A mutant before it is numbered among the identical sites of its function."""

    operator: str
    variant: int
    scope: str
    text: str
    line: int
    col: int
    description: str

    def numbered(self, occurrence: int) -> Mutant:
        return Mutant(
            self.operator,
            self.variant,
            self.scope,
            self.text,
            occurrence,
            self.line,
            self.col,
            self.description,
        )


def _docstring_nodes(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings: never mutated."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0]))
    return found


def _one_line(text: str) -> str:
    """Whitespace collapsed, and cut to `TEXT_CHARS` (identical cut texts are told apart by number)."""
    line = " ".join(text.split())
    return line if len(line) <= TEXT_CHARS else line[: TEXT_CHARS - 3] + "..."


def _is_block(node: ast.AST) -> bool:
    """A statement holding other statements (`if`, `for`, `def`, ...): too big to name a site by."""
    return isinstance(node, ast.stmt) and isinstance(getattr(node, "body", None), list)


def _site_text(node: ast.AST, parent: ast.AST | None) -> str:
    """The source a mutant of `node` changes, as one normalised line.

    A bare constant says little on its own, so it is named with the expression or simple
    statement holding it; a condition is named by its test, not by the whole block it guards.
    """
    if isinstance(node, ast.If | ast.While):
        return _one_line(ast.unparse(node.test))
    if isinstance(node, ast.Constant) and isinstance(parent, ast.arguments):
        positional = [*parent.posonlyargs, *parent.args]
        named = list(zip(positional[len(positional) - len(parent.defaults) :], parent.defaults, strict=True))
        named += [(a, d) for a, d in zip(parent.kwonlyargs, parent.kw_defaults, strict=True) if d is not None]
        return next(f"{a.arg}={ast.unparse(d)}" for a, d in named if d is node)
    if isinstance(node, ast.Constant) and parent is not None and not _is_block(parent):
        return _one_line(ast.unparse(parent))
    return _one_line(ast.unparse(node))


def _scoped_nodes(
    tree: ast.Module, functions: frozenset[str] | None
) -> Iterator[tuple[ast.AST, ast.AST | None, str]]:
    """(node, parent, qualified name of the enclosing function or class) for every node mutated.

    Only nodes inside the named functions/methods when `functions` is given; each node once.
    """

    def walk(
        node: ast.AST, parent: ast.AST | None, scope: list[str], chosen: bool
    ) -> Iterator[tuple[ast.AST, ast.AST | None, str]]:
        if chosen:
            yield node, parent, ".".join(scope) or MODULE_SCOPE
        inner = scope
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            inner = [*scope, node.name]
            if functions is not None and not chosen:
                chosen = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in functions
        for child in ast.iter_child_nodes(node):
            yield from walk(child, node, inner, chosen)

    yield from walk(tree, None, [], functions is None)


def _operators(node: ast.AST, docstrings: set[int]) -> Iterator[tuple[str, int, str]]:
    """(operator, variant, description) of every mutation that applies to `node`."""
    if isinstance(node, ast.Compare):
        for index, op in enumerate(node.ops):
            swap = COMPARE_SWAPS.get(type(op))
            if swap is not None:
                yield "negate-compare", index, f"{type(op).__name__} -> {swap.__name__}"
            boundary = BOUNDARY_SWAPS.get(type(op))
            if boundary is not None:
                yield "boundary", index, f"{type(op).__name__} -> {boundary.__name__}"
    elif isinstance(node, ast.BoolOp):
        other = "Or" if isinstance(node.op, ast.And) else "And"
        yield "and-or", 0, f"{type(node.op).__name__} -> {other}"
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        yield "constant", 0, f"{node.value} -> {node.value + 1}"
        yield "constant", 1, f"{node.value} -> {node.value - 1}"
    elif isinstance(node, ast.If | ast.While | ast.IfExp):
        yield "negate-condition", 0, "condition -> not condition"
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "drop-not", 0, "not x -> x"
    elif isinstance(node, ast.Return) and node.value is not None:
        if not (isinstance(node.value, ast.Constant) and node.value.value is None):
            yield "return-none", 0, "return x -> return None"
    elif (
        isinstance(node, ast.Expr | ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete)
        and id(node) not in docstrings
    ):
        yield "delete-statement", 0, f"{type(node).__name__} -> pass"


def _sites(tree: ast.Module, functions: frozenset[str] | None) -> Iterator[tuple[_Site, ast.AST]]:
    docstrings = _docstring_nodes(tree)
    for node, parent, scope in _scoped_nodes(tree, functions):
        line, col = getattr(node, "lineno", 0), getattr(node, "col_offset", 0)
        for operator, variant, description in _operators(node, docstrings):
            yield _Site(operator, variant, scope, _site_text(node, parent), line, col, description), node


def _numbered(tree: ast.Module, functions: frozenset[str] | None) -> list[tuple[Mutant, ast.AST]]:
    """Every mutant of `tree` with its node, in source order, numbered among identical sites."""
    sites = sorted(_sites(tree, functions), key=lambda s: (s[0].line, s[0].col, s[0].operator, s[0].variant))
    seen: dict[tuple[str, int, str, str], int] = {}
    numbered = []
    for site, node in sites:
        key = (site.scope, site.variant, site.operator, site.text)
        occurrence = seen.get(key, 0)
        seen[key] = occurrence + 1
        numbered.append((site.numbered(occurrence), node))
    return numbered


def find_mutants(source: str, functions: frozenset[str] | None = None) -> list[Mutant]:
    """Every mutant of `source` (optionally only inside the named functions), in source order."""
    return [mutant for mutant, _ in _numbered(ast.parse(source), functions)]


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
    for candidate, node in _numbered(tree, functions):
        if candidate.id == mutant.id:
            transformer = _Apply(candidate, node)
            mutated = transformer.visit(tree)
            if not transformer.applied:
                break
            return ast.unparse(ast.fix_missing_locations(mutated))
    raise LookupError(f"mutant {mutant.id} not found")
