"""The old home of ``overrides``, which is :func:`gsp.protocol.overrides` (the old spelling still
works, with a ``DeprecationWarning``)."""

from __future__ import annotations

from ._lazy import moved

__getattr__ = moved(__name__, {"overrides": ("gsp.protocol", "overrides")})
