"""The one compiled piece of gevent-sp-ws, gsp_ws._mask (RFC 6455 masking into a buffer the
caller owns; gsp_ws._frames says why). Optional: without a C compiler or Python's headers the
build goes on without it, and gsp_ws._frames masks with websockets' apply_mask and a copy.
Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("gsp_ws._mask", ["gsp_ws/_mask.c"], optional=True)])
