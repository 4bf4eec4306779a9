"""Listen addresses and Kafka bootstrap servers: `HOST:PORT`, the one rule for both."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator


def split_host_port(addr: str) -> tuple[str, int]:
    """`HOST:PORT` (or `[v6]:PORT`) into its parts; an empty host means every interface.

    Raises ValueError naming the problem (pydantic then names the field).
    """
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"address {addr!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def _check_host_port(addr: str) -> str:
    split_host_port(addr)
    return addr


#: A listen address `HOST:PORT`, checked when the configuration is read.
HostPort = Annotated[str, AfterValidator(_check_host_port)]


def check_bootstrap_servers(servers: str) -> str:
    """`HOST:PORT[,HOST:PORT...]`, or empty for the embedded log: the one rule for Kafka's brokers,
    shared by `log.bootstrap_servers` and `--bootstrap-server` so the two cannot disagree.

    Raises ValueError naming the address that is not HOST:PORT (pydantic then names the field)."""
    if servers:
        for server in servers.split(","):
            split_host_port(server.strip())
    return servers


#: Kafka's brokers, comma-separated `HOST:PORT`; empty selects the embedded log.
BootstrapServers = Annotated[str, AfterValidator(check_bootstrap_servers)]
