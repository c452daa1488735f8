"""Which process holds the other end of a loopback TCP connection: the dashboard's answer to "who asks".

Agents run as the same user as the orchestrator, so an agent can read ``.orchestrator/web.json`` and hold the
token. The token proves only that the caller is on this machine with this user's rights; whether it is a person
is decided as for the control channel, from the kernel: the connection's socket inode (``/proc/net/tcp``) and
the process that has it open (``/proc/PID/fd``), whose ancestry ``control.callers`` then traces to a run or not.
Only actions ask (a read is open to every caller), so the scan of ``/proc`` is paid per button press.
"""

from __future__ import annotations

import ipaddress
import os
import sys

TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
ESTABLISHED = "01"


def _hex_address(host: str, port: int, table: str) -> str:
    """An address as ``/proc/net/tcp{,6}`` writes it: the address's bytes in host order per 32-bit word, then the
    port, both in upper-case hex."""
    ip = ipaddress.ip_address(host)
    if table.endswith("6"):
        packed = (ip if ip.version == 6 else ipaddress.IPv6Address(f"::ffff:{ip}")).packed
    elif ip.version == 4:
        packed = ip.packed
    else:
        return ""
    words = [packed[i : i + 4] for i in range(0, len(packed), 4)]
    text = "".join(int.from_bytes(w, sys.byteorder).to_bytes(4, "big").hex() for w in words)
    return f"{text.upper()}:{port:04X}"


def socket_inode(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The inode of the client's end of the connection ``client`` -> ``server``; None when none is found."""
    for table in TCP_TABLES:
        local, remote = _hex_address(*client, table), _hex_address(*server, table)
        if not local:
            continue
        try:
            with open(table, encoding="ascii") as handle:
                next(handle, None)
                for line in handle:
                    fields = line.split()
                    if len(fields) > 9 and fields[1] == local and fields[2] == remote and fields[3] == ESTABLISHED:
                        return int(fields[9])
        except OSError:
            continue
    return None


def owner_of(inode: int) -> int | None:
    """A process that has the socket ``inode`` open; None when no readable one has."""
    mark = f"socket:[{inode}]"
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        fds = f"/proc/{name}/fd"
        try:
            for fd in os.listdir(fds):
                try:
                    if os.readlink(f"{fds}/{fd}") == mark:
                        return int(name)
                except OSError:
                    continue
        except OSError:
            continue
    return None


def peer_pid(client: tuple[str, int] | None, server: tuple[str, int] | None) -> int | None:
    """The pid at the other end of a loopback connection, or None (not loopback, or not found)."""
    if client is None or server is None:
        return None
    try:
        if not ipaddress.ip_address(client[0]).is_loopback:
            return None
    except ValueError:
        return None
    inode = socket_inode(client, server)
    return owner_of(inode) if inode else None


def is_loopback_client(host: str) -> bool:
    """Whether a connection's client address is this machine's loopback."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
