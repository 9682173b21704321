"""Sockets a process was given rather than made: an inherited listening descriptor (systemd socket
activation, a pre-fork server's shared listener: the ``listen_fd`` option of tcp:// and ipc://)
and an already-connected stream (one end of a ``socketpair``: the ``socket://`` transport).

Each check of the descriptor raises a :class:`gsp.GspError` saying what is wrong with it, and
leaves the caller's descriptor as it was: :class:`gsp.BadOption` for a descriptor that is not
open, not a socket, not a stream or not in the state asked for (listening, connected), and
:class:`gsp.InvalidAddress` for a socket of an address family the URL's scheme does not speak.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any, Collection

from gevent import socket as gsocket

from ..errors import BadOption, InvalidAddress
from ..options import Option, described

__all__ = ["LISTEN_FD", "adopt_listening_socket", "adopt_connected_socket", "family_name"]

_FAMILIES = {getattr(gsocket, n): n for n in ("AF_INET", "AF_INET6", "AF_UNIX")
             if hasattr(gsocket, n)}


def family_name(family: int) -> str:
    """``AF_INET``, ``AF_INET6``, ``AF_UNIX``, or the number of another address family."""
    return _FAMILIES.get(family, f"address family {family}")


@described("int or None", range=">= 0: an open listening socket's descriptor")
def _fd(name: str, v: Any) -> Any:
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise BadOption(f"{name} must be a file descriptor (an int >= 0) or None, not {v!r}")
    return v


#: The ``listen_fd`` option: a listener accepts on this inherited listening descriptor instead of
#: binding (nng 2.0's ``NNG_OPT_LISTEN_FD``). A transport lists it in its options and names the
#: address families it takes in :attr:`gsp.transport.SocketListener.listen_families`.
LISTEN_FD = Option(
    "listen_fd", None, _fd,
    "accept on this inherited listening socket (systemd socket activation, a pre-fork server's "
    "shared listener) instead of binding the URL's address: its family must be the scheme's; "
    "gsp accepts on a duplicate, the descriptor stays the caller's; None = bind",
    scope="listen")


def _wrap(fd: int, what: str, dup: bool) -> Any:
    """A gevent socket on ``fd`` (or on a duplicate of it), checked to be an open stream socket.
    On an error nothing of the caller's is closed."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        raise BadOption(f"{what}: file descriptor {fd} is not open") from None
    if not stat.S_ISSOCK(mode):
        raise BadOption(f"{what}: file descriptor {fd} is not a socket")
    own = os.dup(fd) if dup else fd
    try:
        sock = gsocket.socket(fileno=own)
    except OSError as exc:
        if dup:
            os.close(own)
        raise BadOption(f"{what}: file descriptor {fd}: {exc.strerror or exc}") from None
    if sock.type != gsocket.SOCK_STREAM:
        _drop(sock, dup)
        raise BadOption(f"{what}: file descriptor {fd} is not a stream socket (SOCK_STREAM)")
    return sock


def _drop(sock: Any, dup: bool) -> None:
    """Let go of a socket :func:`_wrap` made: close a duplicate, leave the caller's own fd open."""
    if dup:
        sock.close()
    else:
        sock.detach()


def _listening(sock: Any) -> bool:
    return bool(sock.getsockopt(gsocket.SOL_SOCKET, gsocket.SO_ACCEPTCONN))


def adopt_listening_socket(fd: int, families: Collection[int], what: str) -> Any:
    """A gevent socket accepting on a duplicate of the listening socket ``fd`` (the caller's
    descriptor stays open and theirs), checked: open, a stream socket, listening, and of one of
    ``families`` (:class:`gsp.InvalidAddress` otherwise, naming both). ``what`` starts each error
    message (``"listen tcp://"``). Raises :class:`gsp.BadOption` as the module says."""
    sock = _wrap(fd, what, dup=True)
    try:
        if sock.family not in families:
            want = " or ".join(family_name(f) for f in families)
            raise InvalidAddress(f"{what}: file descriptor {fd} is an {family_name(sock.family)} "
                                 f"socket; this scheme listens on {want}")
        if not _listening(sock):
            raise BadOption(f"{what}: file descriptor {fd} is not listening (bind and listen() "
                            f"it first, or let gsp bind the URL's address)")
    except BaseException:
        sock.close()
        raise
    return sock


def adopt_connected_socket(fd: int, what: str) -> Any:
    """A gevent socket on the connected stream socket ``fd`` itself, which it owns from now on
    (closing it closes the connection), checked: open, a stream socket, not listening, connected.
    On an error the caller's descriptor is left open and theirs. Raises :class:`gsp.BadOption`."""
    sock = _wrap(fd, what, dup=False)
    try:
        if _listening(sock):
            raise BadOption(f"{what}: file descriptor {fd} is a listening socket, not a "
                            f"connection (listen on it with the listen_fd option instead)")
        sock.getpeername()
    except OSError as exc:
        sock.detach()
        if exc.errno == errno.ENOTCONN:
            raise BadOption(f"{what}: file descriptor {fd} is not connected") from None
        raise BadOption(f"{what}: file descriptor {fd}: {exc.strerror or exc}") from None
    except BaseException:
        sock.detach()
        raise
    return sock
