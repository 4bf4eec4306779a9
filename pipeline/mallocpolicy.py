"""How the process asks the C allocator for memory back: glibc's heap, not Python's objects.

Every Python object larger than 512 bytes (each object's JSON and rendered file, a snapshot
chunk's record of up to 4 MiB) comes from the C library's `malloc`, and a first sync frees most
of them again part by part. glibc keeps what is freed inside its heap for the next `malloc`; in a
100,000-object first sync the heap held 70-110 MiB free while the stages ran. glibc also raises
its mmap threshold to the size of each large mapped block that is freed (up to 32 MiB), so after
the first snapshot chunks every multi-MiB buffer came from the heap, between long-lived small
blocks that pin its pages. `configure()` fixes the threshold at 128 KiB, glibc's own start value:
a large buffer is mapped for itself and unmapped as soon as it is freed (glibc only; on another C
library it does nothing).

Trimming the heap as well (`malloc_trim` every 2 s off the loop) took another 30 MiB off a
100,000-object sync's peak but cost 6-7 CPU-seconds of its 29 (the pages it returns are faulted
in again) and every call holds the heap's lock for 20-50 ms; every 10 s it took nothing off the
peak. It is not done (docs/operations.md, "Where the rest of a first sync's memory went").
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache

__all__ = ["MMAP_THRESHOLD_BYTES", "configure"]

#: glibc's `M_MMAP_THRESHOLD` parameter number (malloc.h) and its start value.
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024


@cache
def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (it has `mallopt`), else None."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
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
