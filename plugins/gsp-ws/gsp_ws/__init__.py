"""gevent-sp-ws: the ws:// and wss:// transports for gsp (nng-compatible) and SP in WSGI apps.

gsp finds the transports through the ``gsp`` entry-point group (module :mod:`gsp_ws.transport`);
importing this package is only needed for :mod:`gsp_ws.wsgi` and for :class:`Refusal`, what a
``ws_authorize`` check (:mod:`gsp_ws.auth`) answers to refuse an upgrade. The request the check
sees is a :class:`gsp.transport.WSRequest`, the one type of an upgrade request (also
``pipe.peer.ws_request``, and what the ``gsp.admit.ws_*`` rules read). A refused upgrade raises
:class:`gsp.UpgradeRefused` (``.status``: the HTTP status, ``.reason``: its text) in the dialer,
also importable from here.
"""

import warnings
from typing import Any

from gsp import UpgradeRefused

from ._http import SUFFIX, WS_OPTIONS, subprotocol
from .auth import Refusal

__all__ = ["UpgradeRefused", "Refusal", "WS_OPTIONS", "SUFFIX", "subprotocol"]
__version__ = "0.1.0"

#: Old spellings: they work for one minor version and warn.
_MOVED = {"UpgradeRequest": "WSRequest", "Headers": "Headers"}


def __getattr__(name: str) -> Any:
    new = _MOVED.get(name)
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"gsp_ws.{name} is gsp.transport.{new} now (the one type of an upgrade "
                  f"request); gsp_ws.{name} goes in the next minor version",
                  DeprecationWarning, stacklevel=2)
    import gsp.transport

    return getattr(gsp.transport, new)
