"""Which OS thread runs: the check that a gsp object is used from the thread whose hub made it
(:class:`gsp.WrongThread`)."""

from __future__ import annotations

from gevent.monkey import get_original

#: The OS thread's id, even in a monkey-patched program (where ``threading.get_ident`` is the
#: greenlet's: greenlets of one thread share its hub, so they may share its sockets).
ident = get_original("_thread", "get_ident")
