"""How the process asks the C allocator for memory back: glibc's heap, not Python's objects.

Every Python object larger than 512 bytes (each object's JSON and rendered file, a snapshot
chunk's record of up to 4 MiB) comes from the C library's `malloc`, and a first sync frees most
of them again part by part. glibc keeps what is freed inside its heap for the next `malloc`, so
the resident size stays at the sync's high-water mark plus whatever the heap could not reuse: in
a 100,000-object first sync the heap held 70-110 MiB free while the stages ran. Two settings
give it back (glibc only; on another C library both do nothing):

- `configure()` fixes the mmap threshold at 128 KiB, glibc's own start value. glibc raises the
  threshold to the size of each large mapped block that is freed (up to 32 MiB), so after the
  first snapshot chunks every multi-MiB buffer came from the heap, between long-lived small
  blocks that pin its pages; with the threshold fixed, a large buffer is mapped for itself and
  unmapped as soon as it is freed;
- `give_back()` returns the heap's free pages to the kernel (`malloc_trim`); the service runs it
  every `TRIM_INTERVAL_S` off the event loop (`trim_forever`).

Measured on `make bench scale` with 100,000 ConfigMaps: 443 MiB peak without either, 408 MiB
with both (docs/operations.md, "Memory of a first sync").
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from functools import cache

__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_INTERVAL_S", "configure", "give_back", "trim_forever"]

logger = logging.getLogger(__name__)

#: glibc's `M_MMAP_THRESHOLD` parameter number (malloc.h) and its start value.
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024
TRIM_INTERVAL_S = 2.0


@cache
def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (it has `malloc_trim` and `mallopt`), else None."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):
        return None
    return libc


def configure() -> bool:
    """Fix the mmap threshold; returns whether the C library took it."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def give_back() -> bool:
    """Return the heap's free pages to the kernel; returns whether any were returned."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))


async def trim_forever(interval_s: float = TRIM_INTERVAL_S) -> None:
    """`give_back()` every `interval_s` in a worker thread (it walks the heap under its lock)."""
    if _glibc() is None:
        logger.debug("not glibc: the heap is left to the C library")
        return
    while True:
        await asyncio.sleep(interval_s)
        await asyncio.to_thread(give_back)
