"""Pipe events: running the hooks and callbacks a socket has for them, and logging what they do
(a callback that raises is logged and changes nothing else)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from . import log
from .pipe import Pipe, PipeEvent
from .registry import registry

if TYPE_CHECKING:
    from .socket import Socket


def fire(sock: "Socket", event: PipeEvent, pipe: Pipe) -> None:
    """Run the gsp_pipe_event hooks and the socket's callbacks for ``event`` on ``pipe``."""
    # A callback that raises is logged and changes nothing else: the pipe is not rejected
    # (rejecting is an explicit pipe.close() at ATTACHING), later callbacks still run.
    try:
        registry.pm.hook.gsp_pipe_event(socket=sock, event=event, pipe=pipe)
    except Exception as exc:
        _callback_failed(sock, "a gsp_pipe_event hook", event, pipe, exc)
    for cb in [*sock._callbacks]:
        try:
            cb(event, pipe)
        except Exception as exc:
            _callback_failed(sock, cb, event, pipe, exc)

def _callback_failed(sock: "Socket", cb: object, event: PipeEvent, pipe: Pipe,
                     exc: Exception) -> None:
    """Log a raising pipe callback: with its traceback at ERROR the first time this callback
    raises this type of error, at DEBUG after that."""
    try:
        key: tuple[object, type[BaseException]] = (cb, type(exc))
        first = key not in sock._callback_errors
    except TypeError:  # an unhashable callable object
        key = (id(cb), type(exc))
        first = key not in sock._callback_errors
    if first:
        sock._callback_errors.add(key)
    level = logging.ERROR if first else logging.DEBUG
    if log.socket_log.isEnabledFor(level):
        url = log.pipe_url(pipe)
        log.socket_log.log(
            level, "%s %s: pipe event callback %r raised %s at %s of pipe %d; the pipe "
            "carries on%s", sock.protocol, url, cb, type(exc).__name__, event.name, pipe.id,
            " (later ones like it are logged at DEBUG)" if first else f": {exc}",
            exc_info=exc if first else None, extra=log.fields(sock, url, pipe))


def log_rejected(sock: "Socket", pipe: Pipe, how: str) -> None:
    """Log (INFO) that ``pipe`` was rejected ``how``."""
    if log.socket_log.isEnabledFor(logging.INFO):
        url = log.pipe_url(pipe)
        log.socket_log.info("%s %s: pipe %d (peer %s) rejected %s", sock.protocol, url,
                            pipe.id, pipe.remote_address, how,
                            extra=log.fields(sock, url, pipe))
