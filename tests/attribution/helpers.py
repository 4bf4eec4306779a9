"""Builders shared by the attribution tests: facts, queries and a settable clock."""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.attribution import FactIndex, FactQuery, IndexLimits
from pipeline.codec.fact_batch import AuthorFact
from pipeline.models import GroupResource

CM = GroupResource("", "configmaps")
DEPLOY = GroupResource("apps", "deployments")
ROUTE = "default"
T0 = 1_800_000_000.0


class Clock:
    """Wall clock the test moves by hand (seconds since the epoch)."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    @property
    def ms(self) -> int:
        return int(self.now * 1000)


def make_index(clock: Clock | None = None, **limits: float) -> FactIndex:
    return FactIndex(IndexLimits(**limits), clock=clock or Clock())  # type: ignore[arg-type]


def fact(
    author: str = "alice",
    verb: str = "update",
    *,
    ns: str = "ns-1",
    name: str = "",
    uid: str = "",
    rv: str = "",
    selector: str | None = None,
    uids: list[str] | None = None,
    stage_us: int = 0,
) -> AuthorFact:
    return AuthorFact(
        author=author,
        verb=verb,
        audit_id=f"audit-{author}-{verb}",
        namespace=ns,
        name=name,
        uid=uid,
        resource_version=rv,
        stage_timestamp_us=stage_us,
        label_selector=selector,
        uids=uids,
    )


def query(
    *,
    uid: str = "",
    rv: str = "",
    ns: str = "ns-1",
    name: str = "",
    labels: Mapping[str, str] | None = None,
    exact_capable: bool = True,
    route: str = ROUTE,
    gr: GroupResource = CM,
) -> FactQuery:
    return FactQuery(route, gr, uid, rv, ns, name, dict(labels or {}), exact_capable)


def removal(**kwargs: object) -> FactQuery:
    return query(exact_capable=False, **kwargs)  # type: ignore[arg-type]
