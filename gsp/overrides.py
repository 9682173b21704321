"""Where ``overrides`` was: it is :func:`gsp.protocol.overrides` (``gsp.overrides.overrides``
still works, with a ``DeprecationWarning``)."""

from __future__ import annotations

from ._lazy import moved

__getattr__ = moved(__name__, {"overrides": ("gsp.protocol", "overrides")})
