"""What is wrong with one field of one object, as the compiler, the tenant boundary and status say it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FieldProblem"]


@dataclass(frozen=True, slots=True)
class FieldProblem:
    """An error in one field of one object (`path` is the custom resource's field)."""

    path: str
    message: str

    def describe(self) -> str:
        return f"{self.path}: {self.message}"
