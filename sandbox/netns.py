"""A network namespace of its own for a program that binds a port no flag moves.

Crossplane's RBAC manager serves metrics on :8080 whatever it is told
(`crossplane rbac start` has no flag for it: controller-runtime's default
bind address), which is harmless in its pod, whose ports are its own. Here
several would share the host's: a sandbox's beside the tests', two
developers' side by side. So it runs in a network namespace of its own, as a
pod does, whose loopback reaches the host's API server through a forwarder:
a socket listening in the namespace on the API server's own address and
port, each connection relayed to the host's. The program is started in it
with `nsenter`, which enters the namespace and executes it (signals reach
the program itself).

Making a network namespace needs CAP_SYS_ADMIN: the sandbox runs as root.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import socket
import struct
import threading
from collections.abc import Callable
from typing import TypeVar

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
# struct ifreq: the interface's name, then a union of which only the flags are used.
_IFREQ = "16sH22x"
_LOOPBACK = "127.0.0.1"
_BUFFER = 65536
_libc = ctypes.CDLL(None, use_errno=True)

T = TypeVar("T")


def _check(result: int) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def _on_a_thread(work: Callable[[], T]) -> T:
    """Run `work` on a thread of its own: namespace changes stay with that thread."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:  # noqa: BLE001 (handed to the caller, raised there)
            outcome["error"] = error

    thread = threading.Thread(target=run, name="netns")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


def _loopback_up() -> None:
    """Bring up `lo` of the calling thread's network namespace (a new one has it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack(_IFREQ, b"lo", 0)
        flags = struct.unpack(_IFREQ, fcntl.ioctl(probe, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))


def _relay(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(_BUFFER):
            target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


def _connection(inside: socket.socket, outside: socket.socket) -> None:
    """Relay both ways until both sides are done, then close both."""
    back = threading.Thread(target=_relay, args=(outside, inside), daemon=True)
    back.start()
    _relay(inside, outside)
    back.join()
    inside.close()
    outside.close()


class NetworkNamespace:
    """A new network namespace, with forwarders to the host's loopback; `close` ends them."""

    def __init__(self) -> None:
        def make() -> int:
            _check(_libc.unshare(CLONE_NEWNET))
            handle = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            _loopback_up()
            return handle

        try:
            self._handle = _on_a_thread(make)
        except PermissionError as error:
            msg = "a network namespace of its own needs root (CAP_SYS_ADMIN)"
            raise PermissionError(msg) from error
        self._listeners: list[socket.socket] = []

    @property
    def path(self) -> str:
        """The namespace as a path `nsenter --net=` takes (valid while it is open)."""
        return f"/proc/{os.getpid()}/fd/{self._handle}"

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run inside the namespace."""
        return ["nsenter", f"--net={self.path}", "--", *argv]

    def forward(self, port: int) -> None:
        """Relay 127.0.0.1:`port` inside the namespace to 127.0.0.1:`port` of the host."""

        def listen() -> socket.socket:
            _check(_libc.setns(self._handle, CLONE_NEWNET))
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((_LOOPBACK, port))
            listener.listen(64)
            return listener

        listener = _on_a_thread(listen)
        self._listeners.append(listener)
        threading.Thread(
            target=self._accept, args=(listener, port), name=f"netns-{port}", daemon=True
        ).start()

    @staticmethod
    def _accept(listener: socket.socket, port: int) -> None:
        while True:
            try:
                inside, _ = listener.accept()
            except OSError:
                return  # closed
            try:
                outside = socket.create_connection((_LOOPBACK, port))
            except OSError:
                inside.close()
                continue
            threading.Thread(target=_connection, args=(inside, outside), daemon=True).start()

    def close(self) -> None:
        """Stop forwarding and let the namespace go once nothing runs in it."""
        for listener in self._listeners:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        self._listeners.clear()
        with contextlib.suppress(OSError):
            os.close(self._handle)
