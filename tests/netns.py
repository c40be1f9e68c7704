"""Several hosts on one machine: network namespaces joined by veth pairs on a Linux bridge.

``Network`` makes a bridge in the root namespace (the test process reaches every host
through the bridge's own address, the ``.1`` of a private /24 in 10.231.0.0/16), and each
``Host`` is a namespace with its loopback and one veth whose other end is on the bridge. A
command runs on a host with ``ip netns exec``; a service there binds the host's address.
``Host.cut`` takes the bridge end of the host's veth down: the host keeps running and its
packets are silently dropped, as when a machine drops off the network without dying;
``Host.restore`` puts it back.

Names carry the test process's pid (``rsn<pid>``), so parallel test processes do not meet;
``remove_leftovers`` deletes the namespaces and links of processes that no longer exist (a
run that was killed before its finalizers ran).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tests.requirements import unavailable, uses

PREFIX = "rsn"
_NAMED = re.compile(rf"^{PREFIX}(\d+)")


def ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    command = ["ip", *(["netns", "exec", netns, "ip"] if netns else []), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")
    return done.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_leftovers() -> None:
    """Delete namespaces and links named after test processes that have exited."""
    for line in ip("netns", "list", check=False).splitlines():
        name = line.split()[0] if line.strip() else ""
        found = _NAMED.match(name)
        if found and not _alive(int(found.group(1))):
            _kill_processes_in(name)
            ip("netns", "delete", name, check=False)
    for line in ip("-o", "link", "show", check=False).splitlines():
        parts = line.split(":")
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@")[0]
        found = _NAMED.match(name)
        if found and not _alive(int(found.group(1))):
            ip("link", "delete", name, check=False)


def _kill_processes_in(netns: str) -> None:
    pids = subprocess.run(
        ["ip", "netns", "pids", netns], capture_output=True, text=True, timeout=30
    ).stdout.split()
    for pid in pids:
        with suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def netns_unavailable() -> str | None:
    """Why this machine cannot make test hosts (None if it can): tried, not guessed."""
    uses("netns")
    if shutil.which("ip") is None:
        return "`ip` (iproute2) not found: install iproute2 to run the multi-host tests"
    probe = f"{PREFIX}{os.getpid()}probe"
    try:
        ip("netns", "add", probe)
        ip("link", "add", f"{PREFIX}{os.getpid()}pb", "type", "bridge")
    except Exception as err:
        return (
            f"cannot make network namespaces and a bridge ({err}): the multi-host tests need "
            "root (CAP_SYS_ADMIN, CAP_NET_ADMIN) on Linux with iproute2"
        )
    finally:
        ip("link", "delete", f"{PREFIX}{os.getpid()}pb", check=False)
        ip("netns", "delete", probe, check=False)
    return None


def _free_subnet() -> int:
    """A third octet whose 10.231.N.0/24 no interface of this machine uses yet."""
    used = ip("-o", "-4", "addr", "show")
    start = os.getpid() % 200 + 20
    for offset in range(200):
        octet = (start + offset - 20) % 200 + 20
        if f"10.231.{octet}." not in used:
            return octet
    raise RuntimeError("no free 10.231.N.0/24 for the test hosts")


@dataclass
class Host:
    """A network namespace with one address on the test bridge."""

    name: str  # the short name the test gives it (data, wa, ...)
    netns: str
    address: str
    outside: str  # the veth end on the bridge (root namespace)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)

    def command(self, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def run(
        self, argv: Sequence[str], env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """``argv`` on this host, to its end; its output captured."""
        return subprocess.run(
            self.command(argv), capture_output=True, text=True, env=env, timeout=timeout
        )

    def start(
        self, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """``argv`` in the background on this host, its output in ``log_path``; stopped
        with the network. ``ip netns exec`` execs the command: the pid is the command's."""
        log = log_path.open("ab")
        self.logs.append(log)
        process = subprocess.Popen(
            self.command(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def cut(self) -> None:
        """Drop every packet to and from this host (the bridge end of its link goes down)."""
        ip("link", "set", self.outside, "down")

    def restore(self) -> None:
        ip("link", "set", self.outside, "up")

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                with suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=10)
        _kill_processes_in(self.netns)  # anything they left behind (postgres's children)
        for log in self.logs:
            log.close()


class Network:
    """A bridge and the hosts on it; ``close`` deletes them all (also after a failure)."""

    def __init__(self) -> None:
        remove_leftovers()
        self.tag = f"{PREFIX}{os.getpid()}"
        self.octet = _free_subnet()
        self.bridge = f"{self.tag}br"
        self.address = f"10.231.{self.octet}.1"  # the test process's own address
        self.hosts: dict[str, Host] = {}
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.address}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def add_host(self, name: str) -> Host:
        """A new host, ``name`` of at most 4 letters, on the next address."""
        index = len(self.hosts) + 2
        netns = f"{self.tag}-{name}"
        outside, inside = f"{self.tag}{name}o", f"{self.tag}{name}i"
        address = f"10.231.{self.octet}.{index}"
        ip("netns", "add", netns)
        host = Host(name, netns, address, outside)
        self.hosts[name] = host
        ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        ip("link", "set", inside, "netns", netns)
        ip("link", "set", outside, "master", self.bridge)
        ip("link", "set", outside, "up")
        ip("addr", "add", f"{address}/24", "dev", inside, netns=netns)
        ip("link", "set", inside, "up", netns=netns)
        ip("link", "set", "lo", "up", netns=netns)
        return host

    def close(self) -> None:
        for host in self.hosts.values():
            host.stop()
            ip("link", "delete", host.outside, check=False)
            ip("netns", "delete", host.netns, check=False)
        ip("link", "delete", self.bridge, check=False)


def wait_listening(address: str, port: int, timeout: float, what: str) -> None:
    """Wait until ``address:port`` accepts a TCP connection (from the test process)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((address, port), timeout=1):
                return
        except OSError as err:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not listening on {address}:{port}: {err}") from None
            time.sleep(0.2)


def require_netns() -> None:
    reason = netns_unavailable()
    if reason is not None:
        unavailable(reason)
