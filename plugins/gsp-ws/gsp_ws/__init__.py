"""gevent-sp-ws: the ws:// and wss:// transports for gsp (nng-compatible) and SP in WSGI apps.

gsp finds the transports through the ``gsp`` entry-point group (module :mod:`gsp_ws.transport`);
importing this package is only needed for :mod:`gsp_ws.wsgi` and for :class:`Refusal`, what a
``ws_authorize`` check (:mod:`gsp_ws.auth`) answers to refuse an upgrade. The request the check
sees is a :class:`gsp.transport.WSRequest`, the one type of an upgrade request (also
``pipe.peer.ws_request``, and what the ``gsp.admit.ws_*`` rules read). A refused upgrade raises
:class:`gsp.UpgradeRefused` (``.status``: the HTTP status, ``.reason``: its text) in the dialer,
also importable from here.
"""

import importlib
import warnings
from typing import Any, Callable

from gsp import UpgradeRefused

from ._http import SUFFIX, WS_OPTIONS, subprotocol
from .auth import Refusal

__all__ = ["UpgradeRefused", "Refusal", "WS_OPTIONS", "SUFFIX", "subprotocol"]
__version__ = "1.0.0rc1"

def _moved(names: dict[str, tuple[str, str]]) -> Callable[[str], Any]:
    """The module's ``__getattr__`` for old spellings (old -> (new module, new name)): they work
    for one minor version and warn, naming the new one."""

    def __getattr__(name: str) -> Any:
        where = names.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        warnings.warn(f"gsp_ws.{name} is deprecated: use {where[0]}.{where[1]} (the one type "
                      "of an upgrade request)", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(where[0]), where[1])

    return __getattr__


__getattr__ = _moved({"UpgradeRequest": ("gsp.transport", "WSRequest"),
                      "Headers": ("gsp.transport", "Headers")})
