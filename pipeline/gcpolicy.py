"""How the process uses Python's cyclic garbage collector: long-lived structures leave its walks.

A full (generation 2) collection walks every container the collector tracks and holds the GIL
while it does, so it stops the event loop and the ops server's thread alike. After a first sync
of 20,000 objects that is some 226,000 containers, most of them the commit worker's home index
(`pipeline.intent.homes`), and each full collection took 0.3-0.8 s: `/healthz` went unanswered
for as long (issue 32 allows 100 ms). Those containers live as long as the process or the
branch, and the index's entries hold no reference cycles (reference counting frees them when an
entry is replaced), so walking them again finds nothing to collect.

`gc.freeze()` moves every tracked container to a permanent generation that collections skip; it
costs no walk. It is used at three points:

- `after_imports()`, once per process when the service starts: what the imports built (some
  100,000 containers of modules, classes and functions) is frozen. Without it the first full
  collection of the start (the watch stage's import of kubernetes-asyncio sets one off) walked
  them all, 60-85 ms in which the ops thread could not answer: the worst `/healthz` answer of a
  quiet 10,000-object first sync;
- `configure()`, once per process when the service has started: what start-up built (modules,
  classes, settings, the replayed indexes) is frozen;
- `long_lived()`, around work that builds a structure the process keeps (a branch worker's sync,
  a snapshot's apply): while it runs, whatever survives a collection of the middle generation
  (it has outlived two collections) is frozen right after it, so it never reaches the old
  generation a full collection walks. Freezing only what survives full collections was not
  enough: the collector then ran one every ~85,000 allocations, each walking the ~50,000
  containers kept since, 0.1-0.3 s on a loaded host; this way the bench's 20k-object snapshot
  runs no full collection at all and its longest collection is a few milliseconds.

The price: a frozen container that later ends in a reference cycle is not collected (reference
counting still frees the acyclic ones, which the index's entries and a snapshot's decoded objects
are). A branch worker that is dropped is such a cycle, index and all (some 85,000 containers and
45 MB per 5,000 objects it held), so `reclaim()` runs once after a rebalance took branches away:
it thaws everything, runs one full collection and freezes what survives again. That is a single
full-length pause per rebalance, instead of the memory of every worker the process ever dropped.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

__all__ = ["after_imports", "configure", "configured", "long_lived", "reclaim"]

#: The generation `gc.callbacks` report for a collection of the middle generation; its survivors
#: have outlived two collections and would go on to the old one.
_MIDDLE_GENERATION: Final = 1


class _Policy:
    """The process-wide state: whether `after_imports` and `configure` ran, and how many builds
    are running."""

    __slots__ = ("builds", "configured", "imports_frozen")

    def __init__(self) -> None:
        self.imports_frozen = False
        self.configured = False
        self.builds = 0


_POLICY: Final = _Policy()


def after_imports() -> bool:
    """Freeze what the imports built, once per process; True when this call did it.

    Called by the service as its start begins (every module of the stages is imported by then).
    """
    if _POLICY.imports_frozen:
        return False
    gc.freeze()
    _POLICY.imports_frozen = True
    return True


def configure() -> bool:
    """Freeze what start-up built, once per process; True when this call did it.

    Called by the service once it has started (every stage built and its replay done), so the
    objects that live as long as the process are out of every later collection's walk.
    """
    if _POLICY.configured:
        return False
    gc.freeze()
    _POLICY.configured = True
    return True


def configured() -> bool:
    """Whether `configure` has run in this process."""
    return _POLICY.configured


def _freeze_survivors(phase: str, info: dict[str, int]) -> None:
    """A `gc.callbacks` hook: after a collection of the middle generation (or a full one) every
    container outside the young generation has outlived two collections; all are frozen."""
    if phase == "stop" and info["generation"] >= _MIDDLE_GENERATION:
        gc.freeze()


@contextmanager
def long_lived() -> Iterator[None]:
    """While inside, what outlives two collections is frozen (see the module's docstring).

    Builds may overlap (several branch workers on one loop): the hook is installed by the first
    to enter and removed by the last to leave.
    """
    if _POLICY.builds == 0:
        gc.callbacks.append(_freeze_survivors)
    _POLICY.builds += 1
    try:
        yield
    finally:
        _POLICY.builds -= 1
        if _POLICY.builds == 0:
            gc.callbacks.remove(_freeze_survivors)


def reclaim() -> int:
    """Collect what was frozen and has since ended in a garbage cycle (a dropped branch worker),
    then freeze the survivors again; the number of unreachable objects found.

    One full collection over everything: it stops the process for as long as one, so it is run
    once after branches were taken away (a rebalance), never per item.
    """
    gc.unfreeze()
    found = gc.collect()
    gc.freeze()
    return found
