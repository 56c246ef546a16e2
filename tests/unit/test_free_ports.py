"""The test servers' ports (:func:`~kinesis_spout.testing.processes.free_port`): free, and
never one the kernel hands out by itself. A Spark job's accumulator server, a JVM or a
client's connection takes its port from the kernel's ephemeral range; a port chosen there
for a server, or for a connection meant to be refused, can be that process's a moment
later (CI once saw a test's "nothing listens here" ZooKeeper port taken by another test's
Spark job: the job logged PySpark's traceback for the stray connection)."""

from __future__ import annotations

import socket
from pathlib import Path

from kinesis_spout.testing.processes import LOOPBACK, free_port, free_port_pair

RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_start() -> int:
    return int(RANGE.read_text().split()[0]) if RANGE.exists() else 32_768


def test_a_free_port_is_below_the_kernel_s_ephemeral_range_and_free() -> None:
    ports = [free_port() for _ in range(50)]
    assert all(1024 < p < ephemeral_start() for p in ports), ports
    assert len(set(ports)) > 1  # not one fixed port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, ports[-1]))  # free: a server can bind it


def test_a_port_pair_is_two_free_ports_in_a_row() -> None:
    first = free_port_pair()
    for port in (first, first + 1):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", port))
