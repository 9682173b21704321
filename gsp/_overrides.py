"""How gsp finds the optional hooks a plugin's classes override: :func:`overrides` (its home is
:mod:`gsp.protocol`; this private module is where the core, the SDKs and :mod:`gsp.context`
import it from)."""

from __future__ import annotations

__all__ = ["overrides"]


def overrides(obj: object, base: type, name: str) -> bool:
    """Whether ``obj`` (an instance or a class) overrides the optional hook ``name`` of ``base``.

    The one way gsp finds an optional fast path: each interface lists the optional hooks it
    looks for in its ``OPTIONAL_HOOKS`` (:attr:`gsp.protocol.Protocol.OPTIONAL_HOOKS`,
    :attr:`gsp.transport.Connection.OPTIONAL_HOOKS`, :attr:`gsp.protocol.ProtocolContext.OPTIONAL_HOOKS`,
    ...), whose defaults are always correct, and uses an override where a class has one (once,
    when it sets up: not per call). Raises ``ValueError`` for a name ``base`` does not list."""
    if name not in vars(base).get("OPTIONAL_HOOKS", ()):
        raise ValueError(f"{name} is not an optional hook of {base.__name__}")
    cls = obj if isinstance(obj, type) else type(obj)
    return getattr(cls, name) is not getattr(base, name)
