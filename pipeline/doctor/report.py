"""What `reverser doctor` found: one row per check, each failure with what to do about it."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from pydantic import BaseModel

from pipeline.tables import OutputFormat, aligned, document

__all__ = ["Check", "DoctorReport", "Status", "render"]


class Status(StrEnum):
    """OK and INFO pass; FAIL makes doctor exit 1; WARN is a risk that does not stop the pipeline."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    INFO = "info"


class Check(BaseModel):
    """One check: which part (`area`, `subject`), what was checked, the outcome and the remedy."""

    area: str
    subject: str
    check: str
    status: Status
    detail: str = ""
    fix: str = ""


class DoctorReport(BaseModel):
    checks: list[Check] = []

    @property
    def ok(self) -> bool:
        return not any(c.status is Status.FAIL for c in self.checks)

    def extend(self, checks: Iterable[Check]) -> None:
        self.checks.extend(checks)


def render(report: DoctorReport, output: OutputFormat) -> str:
    """An aligned table followed by one `fix:` paragraph per failure and warning, or a document."""
    if output is not OutputFormat.TABLE:
        data = report.model_dump(mode="json")
        data["ok"] = report.ok
        return document(data, output)
    rows = [("AREA", "SUBJECT", "CHECK", "STATUS", "DETAIL")]
    rows += [(c.area, c.subject, c.check, c.status.upper(), c.detail) for c in report.checks]
    lines = [aligned(rows)]
    to_fix = [c for c in report.checks if c.fix and c.status in (Status.FAIL, Status.WARN)]
    if to_fix:
        lines.append("")
        lines += [f"{c.status.upper()} {c.area}/{c.subject} {c.check}: {c.fix}" for c in to_fix]
    failed = sum(c.status is Status.FAIL for c in report.checks)
    lines.append("")
    outcome = f"{failed} failed" if failed else "all passed"
    lines.append(f"{len(report.checks)} checks, {outcome}")
    return "\n".join(lines)
