"""ipc:// — SP over a Unix-domain stream socket; each frame carries a 0x01 type byte.

Three schemes, as nng 1.5 has them: ``ipc://path`` and its alias ``unix://path`` (a socket
file), and on Linux ``abstract://name`` (the abstract namespace: no file; the name is
%-decoded, so ``abstract://a%00b`` is the three bytes ``a``, NUL, ``b``, and the kernel's
address is a NUL byte followed by them). Every pipe carries the peer process's credentials
(``peer_pid``, ``peer_uid``, ``peer_gid``), read once when it connects.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import stat
import struct
import sys
from typing import Any, Mapping
from urllib.parse import quote, unquote_to_bytes

from gevent import socket as gsocket

from ..errors import AddressInUse, BadOption, InvalidAddress
from ..hookspecs import hookimpl
from ..options import Option, integer, optional
from ..transport import (
    LISTEN_FD,
    Connection,
    SocketDialer,
    SocketListener,
    StreamConnection,
    Transport,
    bind_stream_socket,
    connect_socket,
    map_socket_error,
    split_url,
    wire,
)

_ID = optional(integer(0, 2**32 - 2, range="0..4294967294"))

IPC_OPTIONS = {o.name: o for o in [
    Option("ipc_file_mode", None, optional(integer(0, 0o7777, range="0o0..0o7777")),
           "chmod the listening socket file to this mode (e.g. 0o600; nng's "
           "NNG_OPT_IPC_PERMISSIONS); None = umask. Not for abstract:// (no file)",
           scope="listen"),
    Option("ipc_file_owner", None, _ID,
           "chown the listening socket file to this user id (needs the privilege to); "
           "None = the process's. Not for abstract://", scope="listen"),
    Option("ipc_file_group", None, _ID,
           "chown the listening socket file to this group id (one of the process's groups, "
           "or any with the privilege); None = the process's. Not for abstract://",
           scope="listen"),
    # The kernel's default (net.core.wmem_default, 208 KiB on most machines) holds less than a
    # 256 KiB message: its sender then waits for the receiver in the middle of every message.
    Option("ipc_send_buffer_size", 512 * 1024, integer(0, unit="bytes"),
           "SO_SNDBUF asked for each connection: the bytes it may have in flight (Linux grants "
           "up to twice net.core.wmem_max); 0 = the kernel's default",
           renamed_from=("ipc_send_buffer",)),
    LISTEN_FD,
]}

_LINUX = sys.platform.startswith("linux")
_SUN_PATH = 107  # bytes of a socket address after the NUL of an abstract name, or of a path
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_credentials(sock: Any) -> dict[str, int]:
    """The connected peer process's pid, uid and gid (SO_PEERCRED, Linux; {} elsewhere)."""
    if not _LINUX:
        return {}
    pid, uid, gid = _CRED.unpack(
        sock.getsockopt(gsocket.SOL_SOCKET, gsocket.SO_PEERCRED, _CRED.size))
    return {"peer_pid": pid, "peer_uid": uid, "peer_gid": gid}


def ipc_path(url: str) -> str:
    scheme, path = split_url(url)
    if not path:
        raise InvalidAddress(f"{url!r} names no path")
    if "\x00" in path:
        raise InvalidAddress(f"{url!r}: NUL in path")
    if len(os.fsencode(path)) > _SUN_PATH:
        raise InvalidAddress(f"{url!r}: path longer than a Unix socket allows (107 bytes)")
    return path


def abstract_name(url: str) -> bytes:
    """The name of ``abstract://name``, %-decoded as nng does (without the leading NUL)."""
    _, name = split_url(url)
    if _BAD_ESCAPE.search(name):
        raise InvalidAddress(f"{url!r}: a % not followed by two hex digits")
    raw = unquote_to_bytes(name)
    if len(raw) > _SUN_PATH:
        raise InvalidAddress(f"{url!r}: name longer than an abstract socket allows (107 bytes)")
    return raw


def abstract_url(name: bytes) -> str:
    return "abstract://" + quote(name, safe="/")


class _IPCEndpoint:
    """What an ipc listener and dialer share: the address, per-connection options, address
    names and the peer's credentials."""

    url: str
    options: Mapping[str, Any]
    framing = wire.IPC

    def _parse(self, url: str) -> None:
        self.scheme = split_url(url)[0]
        self.abstract = self.scheme == "abstract"
        #: What bind/connect take: a path, or the abstract name's bytes after a NUL.
        self.address: str | bytes = (b"\0" + abstract_name(url)) if self.abstract else ipc_path(url)
        self.name = abstract_url(self.address[1:]) if isinstance(self.address, bytes) else (
            f"{self.scheme}://{self.address}")

    def configure(self, sock: Any) -> None:
        size = self.options["ipc_send_buffer_size"]
        if size:
            sock.setsockopt(gsocket.SOL_SOCKET, gsocket.SO_SNDBUF, size)

    def address_name(self, addr: Any) -> str:
        return self.name

    def wrap(self, sock: Any, local: str, remote: str) -> Connection:
        return StreamConnection(sock, self.framing, self.options["max_recv_size"], local, remote,
                                peer_credentials(sock))


class IPCListener(_IPCEndpoint, SocketListener):
    listen_families = (gsocket.AF_UNIX,)

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self._parse(url)
        self._inode: tuple[int, int] | None = None

    def _clear_stale(self, path: str) -> None:
        """Remove a socket file nobody listens on any more; refuse if someone does."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise AddressInUse(f"{path} exists and is not a socket")
        probe = gsocket.socket(gsocket.AF_UNIX, gsocket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)  # stale: left by a process that died
            return
        finally:
            probe.close()
        raise AddressInUse(f"{self.url}: another socket is listening there")

    def bind_socket(self) -> Any:
        if isinstance(self.address, bytes):
            return self._bind_abstract(self.address)
        path = self.address
        self._clear_stale(path)
        sock = gsocket.socket(gsocket.AF_UNIX, gsocket.SOCK_STREAM)
        try:
            sock.bind(path)
        except OSError as exc:
            sock.close()
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):  # a missing directory, not "refused"
                raise InvalidAddress(f"listen {self.url}: no such directory") from None
            raise map_socket_error(exc, f"listen {self.url}") from None
        try:  # the file's mode and owner are set before anyone can connect
            self._set_file(path)
            sock.listen(1024)
            st = os.stat(path)
        except BaseException:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        self._inode = (st.st_dev, st.st_ino)
        return sock

    def _set_file(self, path: str) -> None:
        mode = self.options["ipc_file_mode"]
        uid, gid = self.options["ipc_file_owner"], self.options["ipc_file_group"]
        try:
            if mode is not None:
                os.chmod(path, mode)
        except OSError as exc:
            raise map_socket_error(exc, f"listen {self.url}: chmod") from None
        if uid is None and gid is None:
            return
        try:
            os.chown(path, -1 if uid is None else uid, -1 if gid is None else gid)
        except OSError as exc:
            raise BadOption(f"listen {self.url}: cannot give the socket file to uid {uid}, "
                            f"gid {gid} (ipc_file_owner, ipc_file_group): "
                            f"{exc.strerror or exc}") from None

    def _bind_abstract(self, address: bytes) -> Any:
        # An empty name asks the kernel for a free one (autobind), as in nng: url tells it.
        sock = bind_stream_socket(gsocket.AF_UNIX, address if address != b"\0" else b"",
                                  f"listen {self.url}")
        if address == b"\0":
            bound: bytes = sock.getsockname()
            self.address = bound
            self.name = self.url = abstract_url(bound[1:])
        return sock

    def close(self) -> None:
        was_open = not self._closed
        super().close()
        if was_open and self._inode is not None and isinstance(self.address, str):
            try:  # only unlink the file we created, not a successor's
                st = os.stat(self.address)
                if (st.st_dev, st.st_ino) == self._inode:
                    os.unlink(self.address)
            except OSError:
                pass


class IPCDialer(_IPCEndpoint, SocketDialer):
    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self._parse(url)
        if self.address == b"\0":
            raise InvalidAddress(f"cannot dial {url!r}: an abstract name is needed")

    def connect(self) -> Any:
        return connect_socket(self.url, gsocket.AF_UNIX, self.address, park=self.park_connecting)


_names = itertools.count()


class IPCTransport(Transport):
    """ipc://, its alias unix://, and abstract:// on Linux."""

    schemes = ("ipc", "unix", "abstract") if _LINUX else ("ipc", "unix")
    options = IPC_OPTIONS
    listener_class = IPCListener
    dialer_class = IPCDialer

    def free_url(self, scheme: str, directory: str | None = None) -> str | None:
        if scheme == "abstract":
            return f"abstract://gsp-testing-{os.getpid()}-{os.urandom(6).hex()}"
        if directory is None:
            return None
        return f"{scheme}://{directory}/u{next(_names)}.sock"


@hookimpl
def gsp_transports() -> list[Transport]:
    return [IPCTransport()]
