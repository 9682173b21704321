"""gevent-sp-ws: the ws:// and wss:// transports for gsp (nng-compatible) and SP in WSGI apps.

gsp finds the transports through the ``gsp`` entry-point group (module :mod:`gsp_ws.transport`);
importing this package is only needed for :mod:`gsp_ws.wsgi` and for the names of the
``ws_authorize`` listener option (:mod:`gsp_ws.auth`): :class:`UpgradeRequest`, what the check
sees, and :class:`Refusal`, what it answers to refuse. A refused upgrade raises
:class:`gsp.UpgradeRefused` (``.status``: the HTTP status, ``.reason``: its text) in the dialer,
also importable from here.
"""

from gsp import UpgradeRefused

from ._http import SUFFIX, WS_OPTIONS, subprotocol
from .auth import Headers, Refusal, UpgradeRequest

__all__ = ["UpgradeRefused", "Refusal", "UpgradeRequest", "Headers", "WS_OPTIONS", "SUFFIX",
           "subprotocol"]
__version__ = "1.0.0rc1"
