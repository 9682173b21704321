"""The plugin contract: the hook specifications pluggy calls, and how gsp finds the optional hooks
a plugin's classes override (:func:`overrides`).

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
    from . import Pipe, PipeEvent, Socket
    from .protocol.interface import ProtocolSpec
    from .transport.interface import Transport

__all__ = ["hookspec", "hookimpl", "overrides", "check_op"]

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
def gsp_pipe_event(socket: "Socket", event: "PipeEvent", pipe: "Pipe") -> None:
    """Called for every pipe of every socket at ATTACHING, ATTACHED and DETACHED.

    At ATTACHING an implementation may reject the pipe by calling ``pipe.close()``. It runs in the
    greenlet that set the pipe up, so it must not block. If it raises, the error is logged
    (``gsp.socket``) and the pipe carries on.
    """


# -- optional hooks of the plugin classes -----------------------------------------------------

def overrides(obj: object, base: type, name: str) -> bool:
    """Whether ``obj`` (an instance or a class) overrides the optional hook ``name`` of ``base``.

    The one way gsp finds an optional fast path: each interface lists the optional hooks it
    looks for in its ``OPTIONAL_HOOKS`` (:attr:`Protocol.OPTIONAL_HOOKS`,
    :attr:`gsp.transport.Connection.OPTIONAL_HOOKS`, :attr:`gsp.context.Context.OPTIONAL_HOOKS`,
    ...), whose defaults are always correct, and uses an override where a class has one (once,
    when it sets up: not per call). Raises ``ValueError`` for a name ``base`` does not list."""
    if name not in vars(base).get("OPTIONAL_HOOKS", ()):
        raise ValueError(f"{name} is not an optional hook of {base.__name__}")
    cls = obj if isinstance(obj, type) else type(obj)
    return getattr(cls, name) is not getattr(base, name)


def check_op(op: object) -> None:
    """Raise ValueError unless ``op`` is "recv" or "send"."""
    if op != "recv" and op != "send":
        raise ValueError(f"op must be 'recv' or 'send', not {op!r}")
