"""Pipe events: what the ``gsp_pipe_event`` hook and ``Socket.on_pipe_event`` callbacks are told."""

from __future__ import annotations

import enum


class PipeEvent(enum.Enum):
    ATTACHING = "attaching"  #: handshake done; a callback may reject by ``pipe.close()``
    ATTACHED = "attached"  #: the protocol has the pipe; messages flow
    DETACHED = "detached"  #: the pipe is gone; ``pipe.error`` says why
