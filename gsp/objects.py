"""Objects as messages: the msgpack codec behind ``send_obj``/``recv_obj`` (docs/objects.md).

A message carrying an object is the msgpack encoding of that one object as the whole body, with
nothing before or after it: any msgpack library in any language reads and writes it.
``str`` is packed as msgpack str (UTF-8) and ``bytes`` as msgpack bin, so the two stay apart.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Protocol

import msgpack

from .errors import BadMessage

__all__ = ["pack", "unpack", "ObjectCalls"]


def pack(obj: Any) -> bytes:
    """``obj`` as a message body: its msgpack encoding (``use_bin_type``: bytes stay bin).

    Raises ``TypeError`` for an object msgpack cannot encode (a set, a datetime, a custom
    class) and ``ValueError`` for one out of its range (an int beyond 64 bits)."""
    try:
        body: bytes = msgpack.packb(obj, use_bin_type=True)
    except TypeError as exc:
        raise TypeError(f"cannot encode {type(obj).__name__} as msgpack: {exc}") from exc
    except (OverflowError, ValueError) as exc:
        raise ValueError(f"cannot encode {type(obj).__name__} as msgpack: {exc}") from exc
    return body


def unpack(body: bytes) -> Any:
    """The one object a message body encodes; :class:`gsp.BadMessage` if it is not exactly one
    msgpack object (empty, truncated, trailing bytes, invalid UTF-8 in a str, a malformed
    byte, an unhashable map key)."""
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=False, use_list=True)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise BadMessage(f"message body ({len(body)} bytes) is not one msgpack object ({why})"
                         ) from exc


class _Endpoint(Protocol):
    def send(self, data: bytes, timeout: float | timedelta | None = ...,
             block: bool = True) -> None: ...

    def recv(self, timeout: float | timedelta | None = ...,
             block: bool = True) -> bytes: ...


class ObjectCalls:
    """``send_obj``/``recv_obj`` for sockets and contexts, on top of their ``send``/``recv``."""

    # (``...``: the default of the socket's or context's own send/recv; gsp.options, which
    # names it FROM_OPTION, is not importable from here)
    def send_obj(self: _Endpoint, obj: Any,
                 timeout: float | timedelta | None = ...,  # type: ignore[assignment]
                 block: bool = True) -> None:
        """Send ``obj`` as one msgpack-encoded message (docs/objects.md); ``timeout`` and
        ``block`` as for ``send``."""
        self.send(pack(obj), timeout, block)

    def recv_obj(self: _Endpoint,
                 timeout: float | timedelta | None = ...,  # type: ignore[assignment]
                 block: bool = True) -> Any:
        """Receive one message and decode its msgpack body (:class:`gsp.BadMessage` if it is
        not one msgpack object); ``timeout`` and ``block`` as for ``recv``."""
        return unpack(self.recv(timeout, block))
