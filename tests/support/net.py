"""Loopback ports for servers a test starts.

Asking the kernel for port 0 and releasing it is racy on a busy machine: the kernel hands the same
ephemeral range to outgoing connections and to every other test process, so a broker started a
second later can find its port taken (a CI run lost a Kafka fixture to exactly that). Ports here
come from below the kernel's ephemeral range, which outgoing connections never use, and a counter
shared by every process of the machine (under a file lock) hands each one out once per cycle, so
two xdist workers or two helper processes never race for the same port. Standard library only:
`tests/integration/kafka/broker.py` runs with any Python 3.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["free_port"]

LOWEST_PORT = 15000
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
COUNTER_FILE = Path(tempfile.gettempdir()) / "reverser-test-ports.counter"
ATTEMPTS = 512


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now and that no other caller was handed recently."""
    highest = _first_ephemeral_port() - 1
    if highest - LOWEST_PORT < ATTEMPTS:
        return _kernel_port()
    span = highest - LOWEST_PORT + 1
    with _locked_counter() as counter:
        start = _read(counter)
        for step in range(ATTEMPTS):
            port = LOWEST_PORT + (start + step) % span
            if _bindable(port):
                _write(counter, (start + step + 1) % span)
                return port
    raise OSError(f"no free loopback port among {ATTEMPTS} tried from {LOWEST_PORT + start}")


def _first_ephemeral_port() -> int:
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _kernel_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _bindable(port: int) -> bool:
    """Free for a listener, and not held by a connection lingering in TIME_WAIT either."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def _locked_counter() -> Iterator[int]:
    fd = os.open(COUNTER_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def _read(fd: int) -> int:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 32).decode("ascii", errors="replace").strip()
    # A fresh counter starts at a point of the cycle that depends on the process, so two machines'
    # runs (or a counter file removed mid-run) do not all begin at the lowest port.
    return int(text) if text.isdigit() else os.getpid()


def _write(fd: int, value: int) -> None:
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, f"{value}\n".encode("ascii"))
