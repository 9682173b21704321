"""ipc:// — SP over a Unix-domain stream socket; each frame carries a 0x01 type byte."""

from __future__ import annotations

import errno
import os
import stat
from typing import Any, Mapping

from gevent import socket as gsocket

from ..errors import AddressInUse, InvalidAddress
from ..hookspecs import hookimpl
from ..options import Option, integer, optional
from ..transport import (
    LISTEN_FD,
    SocketDialer,
    SocketListener,
    Transport,
    connect_socket,
    map_socket_error,
    split_url,
    wire,
)

IPC_OPTIONS = {o.name: o for o in [
    Option("ipc_file_mode", None, optional(integer(0, 0o7777, range="0o0..0o7777")),
           "chmod the listening socket file to this mode (e.g. 0o600); None = umask",
           scope="listen"),
    # The kernel's default (net.core.wmem_default, 208 KiB on most machines) holds less than a
    # 256 KiB message: its sender then waits for the receiver in the middle of every message.
    Option("ipc_send_buffer", 512 * 1024, integer(0, unit="bytes"),
           "SO_SNDBUF asked for each connection: the bytes it may have in flight (Linux grants "
           "up to twice net.core.wmem_max); 0 = the kernel's default"),
    LISTEN_FD,
]}


class _IPCEndpoint:
    """What an ipc listener and dialer share: per-connection options and the address name."""

    path: str
    options: Mapping[str, Any]

    def configure(self, sock: Any) -> None:
        size = self.options["ipc_send_buffer"]
        if size:
            sock.setsockopt(gsocket.SOL_SOCKET, gsocket.SO_SNDBUF, size)

    def address_name(self, addr: Any) -> str:
        return f"ipc://{self.path}"


def ipc_path(url: str) -> str:
    scheme, path = split_url(url)
    if not path:
        raise InvalidAddress(f"{url!r} names no path")
    if "\x00" in path:
        raise InvalidAddress(f"{url!r}: NUL in path")
    if len(os.fsencode(path)) > 107:
        raise InvalidAddress(f"{url!r}: path longer than a Unix socket allows (107 bytes)")
    return path


class IPCListener(_IPCEndpoint, SocketListener):
    framing = wire.IPC
    listen_families = (gsocket.AF_UNIX,)

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.path = ipc_path(url)
        self._inode: tuple[int, int] | None = None

    def _clear_stale(self) -> None:
        """Remove a socket file nobody listens on any more; refuse if someone does."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise AddressInUse(f"{self.path} exists and is not a socket")
        probe = gsocket.socket(gsocket.AF_UNIX, gsocket.SOCK_STREAM)
        try:
            probe.connect(self.path)
        except OSError:
            os.unlink(self.path)  # stale: left by a process that died
            return
        finally:
            probe.close()
        raise AddressInUse(f"{self.url}: another socket is listening there")

    def bind_socket(self) -> Any:
        self._clear_stale()
        sock = gsocket.socket(gsocket.AF_UNIX, gsocket.SOCK_STREAM)
        try:
            sock.bind(self.path)
            mode = self.options["ipc_file_mode"]
            if mode is not None:
                os.chmod(self.path, mode)
            sock.listen(1024)
        except OSError as exc:
            sock.close()
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):  # a missing directory, not "refused"
                raise InvalidAddress(f"listen {self.url}: no such directory") from None
            raise map_socket_error(exc, f"listen {self.url}") from None
        st = os.stat(self.path)
        self._inode = (st.st_dev, st.st_ino)
        return sock

    def close(self) -> None:
        was_open = not self._closed
        super().close()
        if was_open and self._inode is not None:
            try:  # only unlink the file we created, not a successor's
                st = os.stat(self.path)
                if (st.st_dev, st.st_ino) == self._inode:
                    os.unlink(self.path)
            except OSError:
                pass


class IPCDialer(_IPCEndpoint, SocketDialer):
    framing = wire.IPC

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.path = ipc_path(url)

    def connect(self) -> Any:
        return connect_socket(self.url, gsocket.AF_UNIX, self.path, park=self.park_connecting)


class IPCTransport(Transport):
    schemes = ("ipc",)
    options = IPC_OPTIONS
    listener_class = IPCListener
    dialer_class = IPCDialer


@hookimpl
def gsp_transports() -> list[Transport]:
    return [IPCTransport()]
