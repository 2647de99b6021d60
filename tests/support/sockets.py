"""The listening TCP sockets of a process tree, read from /proc (Linux): which
addresses a command, its JVM and its Python workers accept connections on."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from pathlib import Path

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def tree(pid: int) -> set[int]:
    """`pid` and every process descended from it, as it stands now."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p not in found:
            found.add(p)
            todo.extend(children.get(p, []))
    return found


def _address(hex_addr: str) -> Address:
    # /proc/net/tcp{,6}: each 32-bit word in host (little-endian) byte order
    raw = b"".join(bytes.fromhex(hex_addr[i : i + 8])[::-1] for i in range(0, len(hex_addr), 8))
    return ipaddress.ip_address(raw)


def _listening() -> dict[str, tuple[Address, int]]:
    """socket inode -> (address, port) of every listening TCP socket here."""
    out = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            addr, port = fields[1].split(":")
            out[fields[9]] = (_address(addr), int(port, 16))
    return out


def listeners(pid: int) -> dict[tuple[int, Address, int], str]:
    """(pid, address, port) -> command name for every listening TCP socket held by
    `pid` or its descendants."""
    table = _listening()
    out = {}
    for p in tree(pid):
        try:
            fds = os.listdir(f"/proc/{p}/fd")
            name = Path(f"/proc/{p}/comm").read_text().strip()
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{p}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in table:
                addr, port = table[link[8:-1]]
                out[(p, addr, port)] = name
    return out


def is_loopback(addr: Address) -> bool:
    """127.0.0.0/8, ::1, or ::ffff:127.x.y.z (a dual-stack socket bound to 127.0.0.1);
    never a wildcard (0.0.0.0, ::), which listens on every interface."""
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped.is_loopback
    return addr.is_loopback


def pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy what `a` receives to `b` until either side closes, then close both: one
    direction of a test's TCP proxy (run one thread per direction)."""
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.close()
