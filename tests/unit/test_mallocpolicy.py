"""The C allocator's policy: large buffers are mapped for themselves.

glibc raises its mmap threshold to the size of each large mapped block freed, so after one
snapshot chunk's buffer was freed the next multi-MiB buffers came from the heap, where freed
pages stay (issue 32's memory budget). Read through glibc's own `mallinfo2` counters; skipped on
another C library, where the policy does nothing.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

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


def check_a_large_buffer_is_mapped_for_itself() -> None:
    """The policy's effect, read from glibc's counters (run in a process of its own below)."""
    assert mallocpolicy.configure()
    freed = bytearray(8 << 20)  # mapped; freeing it raised glibc's threshold to 8 MiB before
    del freed
    before = _mapped_bytes()
    held = bytearray(4 << 20)
    assert _mapped_bytes() >= before + (4 << 20)  # its own mapping, not the heap's pages
    del held
    assert _mapped_bytes() == before  # and unmapped when freed


def test_a_large_buffer_is_mapped_for_itself_after_a_larger_one_was_freed() -> None:
    """In a fresh interpreter: the counters are the whole process's, and threads other tests left
    in a test worker allocate and free while they are read (the full suite once saw them move)."""
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    code = "from tests.unit.test_mallocpolicy import check_a_large_buffer_is_mapped_for_itself as c; c()"
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
