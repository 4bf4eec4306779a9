"""The C allocator's policy: large buffers are mapped for themselves.

glibc raises its mmap threshold to the size of each large mapped block freed, so after one
snapshot chunk's buffer was freed the next multi-MiB buffers came from the heap, where freed
pages stay (issue 32's memory budget). Read through glibc's own `mallinfo2` counters; skipped on
another C library, where the policy does nothing.
"""

from __future__ import annotations

import ctypes

import pytest

from pipeline import mallocpolicy

_FIELDS = (
    "arena",
    "ordblks",
    "smblks",
    "hblks",
    "hblkhd",
    "usmblks",
    "fsmblks",
    "uordblks",
    "fordblks",
    "keepcost",
)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _FIELDS]


def _mapped_bytes() -> int:
    libc = mallocpolicy._glibc()
    assert libc is not None
    libc.mallinfo2.restype = _MallInfo2
    return int(libc.mallinfo2().hblkhd)


pytestmark = pytest.mark.skipif(
    mallocpolicy._glibc() is None or not hasattr(mallocpolicy._glibc(), "mallinfo2"),
    reason="the policy is glibc's, and its counters glibc 2.33's",
)


def test_a_large_buffer_is_mapped_for_itself_after_a_larger_one_was_freed() -> None:
    assert mallocpolicy.configure()
    freed = bytearray(8 << 20)  # mapped; freeing it raised glibc's threshold to 8 MiB before
    del freed
    before = _mapped_bytes()
    held = bytearray(4 << 20)
    assert _mapped_bytes() >= before + (4 << 20)  # its own mapping, not the heap's pages
    del held
    assert _mapped_bytes() == before  # and unmapped when freed
