"""The libraries gsp is measured against, one module each, and their registry.

* ``lib_gsp``  gsp itself, on gevent
* ``lib_nng``  pynng (nng 1.x), on native threads
* ``lib_nng2`` nng 2.0 (the ``nng`` package), on native threads
* ``lib_zmq``  pyzmq on native threads, and zmq.green on gevent
* ``lib_raw``  raw gevent sockets with hand-written framing: the floor for a gevent library
* ``lib_native``  C nng and Go mangos, through small native tools built on first use
  (:mod:`gsp_bench.native`; a library whose tool cannot be built is skipped, saying why)
* ``gsp-spin`` gsp in its low-latency mode (``recv_spin``; not in ``--compare``: ``--libs``)

The roles every workload is made of are written once in :mod:`.base`, over the loops in
:mod:`.loops`; a library module supplies its sockets and overrides a role only where its idiom
differs. A library's own package is imported only when it is made, so a missing one fails just
its runs.
"""

from __future__ import annotations

from .base import Lib, raise_nofile

LIBS = ("gsp", "pynng", "nng2", "pyzmq", "zmq.green", "raw-gevent", "nng", "mangos", "gsp-spin")

__all__ = ["LIBS", "Lib", "make", "raise_nofile"]


def make(name: str) -> Lib:
    """The library called ``name`` (one of :data:`LIBS`), ready to run roles."""
    if name == "gsp":
        from .lib_gsp import Gsp
        return Gsp()
    if name == "pynng":
        from .lib_nng import Nng
        return Nng()
    if name == "nng2":
        from .lib_nng2 import Nng2
        return Nng2()
    if name in ("pyzmq", "zmq.green"):
        from .lib_zmq import Zmq
        return Zmq(green=name == "zmq.green")
    if name == "raw-gevent":
        from .lib_raw import Raw
        return Raw()
    if name in ("nng", "mangos"):
        from .lib_native import Native
        return Native(name)
    if name == "gsp-spin":
        from .lib_gsp import GspSpin
        return GspSpin()
    raise ValueError(f"unknown library {name!r}; choose from {', '.join(LIBS)}")
