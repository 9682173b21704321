"""Shedding connections in their handshake: what a listener does at ``max_handshakes``.

A listener that stops accepting at its bound hands the bound to whoever holds it: a slowloris
keeps every slot, the kernel's backlog fills with more of it, and a good peer waits behind them
(docs/reliability.md, admission control). So gsp's listeners keep accepting, and at the bound
close the connection in its handshake that has made the least progress: the fewest bytes
received, then the oldest. A good peer sends its handshake at once and leaves the room within a
loop turn; an attacker that sends nothing, or half a handshake, is what gets closed.

:class:`HandshakeRoom` keeps that account for any front end that reads something before a
connection becomes a pipe (the core's listeners; gsp-ws's HTTP server, reading upgrade
requests): :meth:`HandshakeRoom.admit` says which connections to shed for a newcomer, and why.
"""

from __future__ import annotations

import socket
import struct
import sys
from itertools import islice
from typing import Any, Callable, Generic, Hashable, Iterator, TypeVar

# The source address of a connection's remote address: one definition for the handshake room's
# per-address bound and the admit rules' (``"tcp://[::1]:5"`` -> ``"::1"``; an IPv4-mapped IPv6
# address as its IPv4; an ipc peer's address itself).
from ..admit import source_of

__all__ = ["HandshakeRoom", "SHED_REASONS", "source_of", "bytes_received"]

#: Why a connection in its handshake was shed: ``"full"``, the listener was at
#: ``max_handshakes``; ``"address"``, its source address was at ``max_handshakes_per_address``.
SHED_REASONS = ("full", "address")

T = TypeVar("T", bound=Hashable)

#: How many of the oldest connections in the room the choice of the one to shed looks at. A good
#: peer completes its handshake within a few loop turns of arriving and is gone from the room;
#: what has waited longest is where the stalled ones are. The bound keeps the choice cheap when
#: every connection has sent something (reading a TLS connection's progress is a system call).
WINDOW = 32


_LINUX = sys.platform.startswith("linux")


def bytes_received(sock: Any) -> int:
    """Bytes the kernel has received from the peer of a TCP socket so far (Linux's
    ``tcp_info.tcpi_bytes_received``, read or not; 0 where unknown): the progress of a
    handshake whose reads are not the caller's to count, as OpenSSL's in a TLS handshake."""
    if not _LINUX:
        return 0
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 136)
    except (OSError, AttributeError, ValueError):
        return 0
    if len(info) < 136:
        return 0
    n: int = struct.unpack_from("Q", info, 128)[0]
    return n


class HandshakeRoom(Generic[T]):
    """The connections in their handshake, oldest first, with their source addresses.

    ``progress(item)`` says how far an item has come (bytes received); it is read only when one
    must be shed, never per byte. :meth:`admit` takes a newcomer, returning what to shed first,
    each with its reason (one of :data:`SHED_REASONS`): at ``limit`` items the one with the least
    progress among the :data:`WINDOW` oldest (the oldest among equals), and at ``per_address``
    items from the newcomer's address the least advanced of those (the same way). The newcomer itself is never refused: good and bad peers may
    share an address (a NAT), and a newcomer has had no chance yet to show progress."""

    __slots__ = ("_items", "_by_address", "_progress")

    def __init__(self, progress: Callable[[T], int]) -> None:
        self._items: dict[T, str] = {}  # item -> its source address, oldest first
        self._by_address: dict[str, int] = {}
        self._progress = progress

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._items))

    def __contains__(self, item: object) -> bool:
        return item in self._items

    def admit(self, item: T, address: str, limit: int, per_address: int = 0
              ) -> list[tuple[T, str]]:
        """Take ``item`` (from source ``address``) in; return the items to shed for it, already
        out of the room (the caller closes them). ``limit``, ``per_address``: 0 = no bound."""
        shed: list[tuple[T, str]] = []
        if per_address and self._by_address.get(address, 0) >= per_address:
            victim = self._least(i for i, a in self._items.items() if a == address)
            self.discard(victim)
            shed.append((victim, "address"))
        if limit and len(self._items) >= limit:
            victim = self._least(iter(self._items))
            self.discard(victim)
            shed.append((victim, "full"))
        self._items[item] = address
        self._by_address[address] = self._by_address.get(address, 0) + 1
        return shed

    def _least(self, items: Iterator[T]) -> T:
        """The first (oldest) item of the least progress among the :data:`WINDOW` first of
        ``items``; the first with none at once."""
        progress = self._progress
        items = islice(items, WINDOW)
        best = next(items)
        least = progress(best)
        if least:
            for item in items:
                p = progress(item)
                if p < least:
                    best, least = item, p
                    if not p:
                        break
        return best

    def discard(self, item: T) -> bool:
        """Take ``item`` out (its handshake ended, or it was shed); False if it was not in."""
        address = self._items.pop(item, None)
        if address is None:
            return False
        n = self._by_address[address] - 1
        if n:
            self._by_address[address] = n
        else:
            del self._by_address[address]
        return True

    def clear(self) -> None:
        self._items.clear()
        self._by_address.clear()
