"""The suite's guard against fixed ports: the service's default ports are refused in a test."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from pipeline.config import AuditSettings, MetricsSettings, split_host_port
from tests.support.fixed_ports import FixedPortError
from tests.support.net import free_port


@pytest.mark.parametrize("addr", [MetricsSettings().addr, AuditSettings().addr])
def test_binding_a_default_service_port_fails_the_test(addr: str) -> None:
    host, port = split_host_port(addr)
    with socket.socket() as sock, pytest.raises(FixedPortError, match=f"fixed port {port}"):
        sock.bind((host, port))


def test_ports_from_free_port_and_port_zero_bind() -> None:
    for port in (free_port(), 0):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
            assert sock.getsockname()[1] > 0


def test_unix_sockets_are_not_ports(tmp_path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "s"))
