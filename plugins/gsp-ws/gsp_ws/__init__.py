"""gevent-sp-ws: the ws:// and wss:// transports for gsp (nng-compatible) and SP in WSGI apps.

gsp finds the transports through the ``gsp`` entry-point group (module :mod:`gsp_ws.transport`);
importing this package is only needed for :mod:`gsp_ws.wsgi`. A refused upgrade raises
:class:`gsp.UpgradeRefused` (``.status``: the HTTP status), also importable from here.
"""

from gsp import UpgradeRefused

from ._http import SUFFIX, WS_OPTIONS, subprotocol

__all__ = ["UpgradeRefused", "WS_OPTIONS", "SUFFIX", "subprotocol"]
__version__ = "0.1.0"
