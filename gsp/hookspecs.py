"""Hook specifications for gsp plugins (signatures and docstrings only).

A plugin is a module (or object) with functions marked ``@gsp.hookimpl``, registered through the
``gsp`` entry-point group in its distribution's metadata::

    [project.entry-points.gsp]
    myscheme = "my_package.gsp_plugin"

gsp's own transports and protocols are registered exactly this way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from ._core.pipe import Pipe, PipeEvent
    from ._core.socket import Socket
    from .protocol import ProtocolSpec
    from .transport import Transport

__all__ = ["hookspec", "hookimpl"]

#: Marks the specifications below (gsp's own use).
hookspec = pluggy.HookspecMarker("gsp")
#: Marks a plugin's implementations: ``@gsp.hookimpl`` (the same object as this one).
hookimpl = pluggy.HookimplMarker("gsp")


@hookspec
def gsp_transports() -> "list[Transport]":
    """Return the transports this plugin provides.

    Each :class:`gsp.transport.Transport` names its URL schemes; two plugins claiming one scheme
    is an error reported when the registry loads.
    """


@hookspec
def gsp_protocols() -> "list[ProtocolSpec]":
    """Return the protocols this plugin provides, as :class:`gsp.protocol.ProtocolSpec` objects."""


@hookspec
def gsp_pipe_event(socket: "Socket", event: "PipeEvent", pipe: "Pipe") -> None:
    """Called for every pipe of every socket at ATTACHING, ATTACHED and DETACHED.

    At ATTACHING an implementation may reject the pipe by calling ``pipe.close()``. It runs in the
    greenlet that set the pipe up, so it must not block. If it raises, the error is logged
    (``gsp.socket``) and the pipe carries on.
    """
