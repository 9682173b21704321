"""The plugin contract: the hook specifications pluggy calls. (How gsp finds the optional hooks a
plugin's classes override is :func:`gsp.protocol.overrides`.)

A plugin is a module (or object) with functions marked ``@gsp.hookimpl``, registered through the
``gsp`` entry-point group in its distribution's metadata::

    [project.entry-points.gsp]
    myscheme = "my_package.gsp_plugin"

gsp's own transports and protocols are registered exactly this way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from ._core.events import PipeEvent
    from ._core.pipe import Pipe
    from .protocol.interface import ProtocolSpec
    from .transport.interface import Transport

__all__ = ["hookspec", "hookimpl", "gsp_transports", "gsp_protocols", "gsp_pipe_event"]

#: Marks the specifications below (gsp's own use).
hookspec = pluggy.HookspecMarker("gsp")
#: Marks a plugin's implementations: ``@gsp.hookimpl`` (the same object as this one).
hookimpl = pluggy.HookimplMarker("gsp")


@hookspec
def gsp_transports() -> "list[Transport]":
    """Return the transports this plugin provides.

    Each :class:`gsp.transport.Transport` names its URL schemes; two plugins claiming one scheme
    is an error reported when the registry loads (:class:`gsp.GspError`). Called when gsp first
    needs a transport and again whenever a plugin is (un)registered: return the same objects,
    built once. Must not raise: an exception escapes from the call that loaded the registry.
    """


@hookspec
def gsp_protocols() -> "list[ProtocolSpec]":
    """Return the protocols this plugin provides, as :class:`gsp.protocol.ProtocolSpec` objects.

    As :func:`gsp_transports`: two plugins claiming one protocol name is a :class:`gsp.GspError`
    when the registry loads; return the same objects each time; must not raise.
    """


@hookspec
def gsp_pipe_event(socket: Any, event: "PipeEvent", pipe: "Pipe") -> None:
    """Called for every pipe of every socket at ATTACHING, ATTACHED and DETACHED, with the
    :class:`gsp.Socket`, the :class:`gsp.PipeEvent` and the :class:`gsp.Pipe`. (``socket`` is
    typed ``Any``: the module of :class:`gsp.Socket` imports this one, and no import, not even
    one for type checkers, goes both ways between two modules.)

    At ATTACHING an implementation may reject the pipe by calling ``pipe.close()``. It runs in the
    greenlet that set the pipe up, so it must not block. If it raises, the error is logged
    (``gsp.socket``) and the pipe carries on.
    """
