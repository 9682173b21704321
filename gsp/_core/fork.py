"""Fork safety: what every open socket does in a child process made by ``fork``.

A process that forks (``os.fork``, gunicorn ``--preload``, uWSGI loading the app in its master,
multiprocessing's "fork") gives the child copies of every socket: the same connections (one file
description shared by both processes) and copies of the greenlets that read and write them. Left
alone, both processes read the same connections and steal each other's replies. So, in the
child, right after the fork and before any greenlet runs (this runs inside ``fork`` itself, from
``os.register_at_fork``), every socket

- drops the pipes it inherited without touching the parent's connections: each transport's
  ``forget`` closes the child's copies of the descriptors only (no ``shutdown()``, nothing sent:
  no SP or ws close, no TLS close_notify), so nothing left in the child can reach them;
- forgets the inherited greenlets (readers, writers, accept loops, handshakes, redial loops,
  the protocol's timers): they are killed once nothing of theirs can reach a shared descriptor;
- redials each of its dialers (fresh connections of the child, in the background);
- leaves its listeners to the parent (the child closes its copy of the listening descriptor); a
  socket whose only endpoints were listeners is closed in the child, and every call on it raises
  :class:`gsp.InheritedListener`, which names the fix. A listener whose transport keeps it
  (``TransportListener.keep_after_fork``: no descriptor of its own, e.g. a WSGI mount's route)
  accepts on in the child instead;
- logs one INFO line (``gsp.socket``) saying what it did.

A socket of another OS thread (a :mod:`gsp.blocking` hub's, a worker thread's) cannot run in the
child, where only the forking thread lives on: its copies of the descriptors are closed the same
way and the socket is closed, its calls raising :class:`gsp.Closed` that says why.

This module installs the hook; what each object does is the socket's (``Socket._after_fork``,
calling the ``*_after_fork`` functions of :mod:`gsp._core.pipe` and :mod:`gsp._core.endpoints`). Nothing here runs in the
parent, and nothing runs per message. See docs/serving.md.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

_hook: Callable[[int], None] | None = None
_pid = os.getpid()  # the process whose sockets these are: the hook runs once per new process


def install(hook: Callable[[int], None]) -> None:
    """Register the child's fork hook once (from the first socket made in the process): in a new
    process, ``hook(parent_pid)`` runs once, before any greenlet does."""
    global _hook
    if _hook is not None:
        return
    _hook = hook
    os.register_at_fork(after_in_child=after_fork_in_child)
    _chain_uwsgi_hook()


def _chain_uwsgi_hook() -> None:
    """uWSGI forks its workers in C without Python's fork hooks (unless started with
    ``--py-call-uwsgi-fork-hooks``): chain onto ``uwsgi.post_fork_hook``, which it calls in each
    new worker (or onto uwsgidecorators' chain, which that hook runs, when it is imported: it
    replaces the hook when imported later, see docs/serving.md). A no-op outside uWSGI; the pid
    check makes a second call harmless."""
    uwsgi: Any = sys.modules.get("uwsgi")
    if uwsgi is None:
        return
    decorators: Any = sys.modules.get("uwsgidecorators")
    if decorators is not None and isinstance(getattr(decorators, "postfork_chain", None), list):
        decorators.postfork_chain.insert(0, after_fork_in_child)  # its hook runs that chain
        return
    previous: Callable[[], None] | None = getattr(uwsgi, "post_fork_hook", None)

    def post_fork_hook() -> None:
        after_fork_in_child()
        if previous is not None:
            previous()

    uwsgi.post_fork_hook = post_fork_hook


def after_fork_in_child() -> None:
    """In a new process: make every socket inherited from the parent the child's own."""
    global _pid
    pid = os.getpid()
    if pid == _pid:
        return
    parent, _pid = _pid, pid
    if _hook is not None:
        _hook(parent)
