"""Simulated hosts for acceptance tests: network namespaces on veth links to a bridge.

The test's own process stays in the host's namespace and reaches every simulated host
(and is reached by them) on the bridge's address, ``Fleet.gateway``. Every namespace,
link and bridge a test makes is removed when ``fleet_network`` exits; traffic goes only
to those addresses. Needs root and ``ip netns``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest


def netns_skip_reason() -> str | None:
    """Why simulated hosts cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    return netns_refused()


def require_netns() -> None:
    """Skip the calling test where simulated hosts cannot be made."""
    reason = netns_skip_reason()
    if reason is not None:
        pytest.skip(reason)


def run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


def quiet(*args: str) -> None:
    subprocess.run(args, check=False, capture_output=True, timeout=30)


def netns_refused() -> str | None:
    """Why network namespaces cannot be made here (None: they can)."""
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "iproute2's ip or util-linux's unshare is not installed"
    probe = f"tidings-probe-{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True,
                          timeout=30)
    if made.returncode != 0:
        return f"ip netns add is refused here: {made.stderr.strip() or made.returncode}"
    quiet("ip", "netns", "del", probe)
    return None


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.0.0.0/8 no route of this machine touches."""
    routes = subprocess.run(["ip", "-4", "route", "show", "table", "all"], check=True,
                            capture_output=True, text=True, timeout=30).stdout
    taken = [ipaddress.ip_network(word, strict=False) for line in routes.splitlines()
             for word in line.split()[:1] if "/" in word or word[:1].isdigit()]
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{secrets.randbelow(50) + 200}."
                                   f"{secrets.randbelow(250) + 1}.0/24")
        if not any(net.overlaps(t) for t in taken if t.version == 4 and t.prefixlen):
            return net
    raise RuntimeError("no free /24 under 10.200.0.0/13")


@dataclass
class Host:
    index: int
    netns: str
    outside: str  # the veth end on the bridge
    inside: str
    address: str
    hostname: str


@dataclass
class Fleet:
    bridge: str
    gateway: str
    hosts: list[Host] = field(default_factory=list)

    def cut(self, host: Host) -> None:
        run("ip", "link", "set", host.outside, "down")

    def mend(self, host: Host) -> None:
        run("ip", "link", "set", host.outside, "up")


@contextlib.contextmanager
def fleet_network(hosts: int) -> Iterator[Fleet]:
    tag = secrets.token_hex(3)
    net = free_subnet()
    gateway = str(net.network_address + 1)
    fleet = Fleet(bridge=f"tdb{tag}", gateway=gateway)
    try:
        run("ip", "link", "add", fleet.bridge, "type", "bridge")
        run("ip", "addr", "add", f"{gateway}/24", "dev", fleet.bridge)
        run("ip", "link", "set", fleet.bridge, "up")
        for n in range(1, hosts + 1):
            host = Host(index=n, netns=f"tidings-{tag}-h{n}", outside=f"tdo{tag}{n}",
                        inside=f"tdi{tag}{n}", address=str(net.network_address + 10 + n),
                        hostname=f"fleet-{tag}-h{n}")
            fleet.hosts.append(host)
            run("ip", "netns", "add", host.netns)
            run("ip", "link", "add", host.outside, "type", "veth", "peer", "name", host.inside)
            run("ip", "link", "set", host.inside, "netns", host.netns)
            run("ip", "link", "set", host.outside, "master", fleet.bridge)
            run("ip", "link", "set", host.outside, "up")
            run("ip", "-n", host.netns, "addr", "add", f"{host.address}/24", "dev", host.inside)
            run("ip", "-n", host.netns, "link", "set", host.inside, "up")
            run("ip", "-n", host.netns, "link", "set", "lo", "up")
        yield fleet
    finally:
        for host in fleet.hosts:
            quiet("ip", "netns", "del", host.netns)  # takes its veth end with it
            quiet("ip", "link", "del", host.outside)
        quiet("ip", "link", "del", fleet.bridge)
