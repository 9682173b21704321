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

Nothing here runs in the parent, and nothing runs per message. See docs/serving.md.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any, Callable

import gevent
from gevent.event import Event

from ..chan import thread_ident
from ..errors import Closed, InheritedListener
from ..protocol.interface import RejectPipe
from . import counters, events, log
from .pipe import PipeEvent, _live_pipes

if TYPE_CHECKING:
    from .endpoints import Dialer, Listener
    from .pipe import Pipe
    from .socket import Socket

_installed = False
_pid = os.getpid()  # the process whose sockets these are: the hook runs once per new process


def install() -> None:
    """Register the child's fork hook once (from the first socket made in the process)."""
    global _installed
    if _installed:
        return
    _installed = True
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
    socks = counters.sockets()
    if not socks:
        return
    # Let the child's event loop have its own poller before anything touches a watcher (gevent
    # does this itself when os.fork is monkey-patched, after this hook; twice is harmless).
    gevent.reinit()
    for sock in socks:
        try:
            _fork_socket(sock, parent)
        except Exception:  # never break the user's fork; the log says what went wrong
            log.socket_log.exception("%s: could not make the socket the child's own after fork",
                                     sock.protocol, extra=log.fields(sock, None))


def _fork_socket(sock: "Socket", parent: int) -> None:
    if sock._hot.tid != thread_ident():
        _orphan(sock, parent)
        return
    pipes = list(sock._pipes.values())
    kept = [lst for lst in sock._listeners if _keeps(lst)]
    listeners = [lst for lst in sock._listeners if lst not in kept]
    dialers = list(sock._dialers)
    # 1. Nothing of this process may reach the parent's connections any more: the child's copy
    #    of every descriptor goes first, before any code of the socket's can run.
    _forget_inherited(pipes, listeners, kept, dialers)
    # 2. The inherited greenlets: killed (not before their next turn, and with every descriptor
    #    they could use closed), except the one forking.
    current = gevent.getcurrent()
    for g in list(sock._group):
        if g is not current:
            g.kill(block=False)
    sock._readers.reset_after_fork()
    # 3. The protocol forgets the pipes, as it does pipes that went.
    for p in pipes:
        _drop_pipe(sock, p)
    # 4. Dialers redial in the background; listeners stay the parent's.
    redialed = _redial(sock, dialers)
    left = [lst.url for lst in listeners]
    for lst in listeners:
        if lst in sock._listeners:
            sock._listeners.remove(lst)
    for lst in kept:  # its accept loop went with the inherited greenlets
        if lst._accepter is not None:
            lst._accepter = sock._spawn(lst._accept_loop)
    closed = bool(left and not dialers and not kept)
    if closed:
        _close_inherited(sock, left, parent)
    if log.socket_log.isEnabledFor(logging.INFO):
        _log_forked(sock, parent, len(pipes), redialed, left, kept, closed)


def _forget_inherited(pipes: "list[Pipe]", listeners: "list[Listener]", kept: "list[Listener]",
                      dialers: "list[Dialer]") -> None:
    """Let go of the child's copy of every descriptor of the parent's connections."""
    for p in pipes:
        p.closed = True
        p._q.close()
        if p._room is not None:
            p._room.close()
        p._conn.forget()
    for lst in listeners:
        _forget_listener(lst)
    for lst in kept:  # handshakes under way are the parent's connections
        for pending in list(lst._pending):
            pending.forget()
        lst._pending.clear()
    for d in dialers:
        d._td.forget()
        conn = d._handshaking
        if conn is not None:
            d._handshaking = None
            conn.forget()


def _redial(sock: "Socket", dialers: "list[Dialer]") -> list[str]:
    """Every dialer starts over in the background; their urls."""
    redialed = []
    for d in dialers:
        d.pipe = None
        d._wake = Event()
        if d._loop_g is not None:  # (else its first attempt is under way and starts the loop)
            d._loop_g = sock._spawn(d._redial_loop, None)
        redialed.append(d.url)
    return redialed


def _log_forked(sock: "Socket", parent: int, pipes: int, redialed: list[str], left: list[str],
                kept: "list[Listener]", closed: bool) -> None:
    what = [f"dropped {_n(pipes, 'pipe')} inherited from process {parent} "
            f"(its connections are the parent's and stay open there)"]
    if redialed:
        what.append(f"redialing {_n(len(redialed), 'dialer')} ({', '.join(redialed)})")
    if left:
        what.append(f"left {_n(len(left), 'listener')} to the parent ({', '.join(left)})")
    if kept:
        what.append(f"kept {_n(len(kept), 'listener')} of this process's own "
                    f"({', '.join(lst.url for lst in kept)})")
    if closed:
        what.append("the socket is closed in this process: listen in the child or make the "
                    "socket after fork (see gsp.InheritedListener)")
    log.socket_log.info("%s: forked (process %d): %s", sock.protocol, os.getpid(),
                        "; ".join(what), extra=log.fields(sock, None, gsp_parent=parent))


def _n(k: int, what: str) -> str:
    return f"{k} {what}{'' if k == 1 else 's'}"


def _keeps(lst: "Listener") -> bool:
    try:
        return bool(lst._tl.keep_after_fork())
    except Exception:  # a transport's bug must not break the fork: leave it to the parent
        return False


def _forget_listener(lst: "Listener") -> None:
    lst._closed = True
    lst._tl.forget()
    for conn in list(lst._pending):
        conn.forget()
    lst._pending.clear()
    lst._accepter = None


def _drop_pipe(sock: "Socket", pipe: "Pipe") -> None:
    if pipe.attached:
        try:
            sock._proto.remove_pipe(pipe)
        except RejectPipe:
            pass
    pipe.reader = pipe._writer = None
    _live_pipes.pop(pipe.id, None)
    sock._pipes.pop(pipe.id, None)
    counters.pipe_gone(sock, pipe)
    if pipe.attached:
        if log.pipe_log.isEnabledFor(logging.DEBUG):
            url = log.pipe_url(pipe)
            log.pipe_log.debug("%s %s: pipe %d (peer %s) dropped after fork (the parent keeps "
                               "it)", sock.protocol, url, pipe.id, pipe.remote_address,
                               extra=log.fields(sock, url, pipe))
        events.fire(sock, PipeEvent.DETACHED, pipe)
    pipe._done.set()


def _orphan(sock: "Socket", parent: int) -> None:
    """A socket of another OS thread (a :mod:`gsp.blocking` hub, a worker thread's): only the
    forking thread lives on in the child, so nothing of that socket can run here. The child's
    copies of its descriptors are closed (nothing sent, as above), its greenlets, queues and
    waiters are left untouched (they belong to a hub that is gone), and every call on it raises
    :class:`gsp.Closed`, saying why."""
    for p in list(sock._pipes.values()):
        p.closed = True
        p._conn.forget()
    for lst in list(sock._listeners):
        if not _keeps(lst):
            _forget_listener(lst)
    for d in list(sock._dialers):
        d._closed = True
        d._td.forget()
        conn = d._handshaking
        if conn is not None:
            d._handshaking = None
            conn.forget()
    sock._inherited = Closed(
        f"this {sock.protocol} socket belongs to OS thread {sock._hot.tid} of process {parent}, "
        f"which does not exist in this forked child (pid {os.getpid()}): it is closed here. Make "
        f"the child's sockets in the child (gsp.per_process, or gsp.blocking's hub, which starts "
        f"afresh in a child)")
    sock._closed = True
    counters.forget(sock)
    if log.socket_log.isEnabledFor(logging.INFO):
        log.socket_log.info("%s: forked (process %d): the socket belongs to another OS thread of "
                            "process %d, which the child does not have: its copies of %s closed, "
                            "the socket closed here", sock.protocol, os.getpid(), parent,
                            _n(len(sock._pipes), "pipe"),
                            extra=log.fields(sock, None, gsp_parent=parent))


def _close_inherited(sock: "Socket", urls: list[str], parent: int) -> None:
    """A socket whose only endpoints were listeners has nothing to do in the child: it is closed
    here, and every call on it says why and what to do instead."""
    sock._inherited = InheritedListener(
        f"this {sock.protocol} socket was made in process {parent} before it forked, and its "
        f"only endpoints are that process's listeners ({', '.join(urls)}), which stay there: it "
        f"is closed in this process (pid {os.getpid()}). Make the socket after fork (gunicorn "
        f"post_fork, or gsp.per_process(factory)), or make a socket in this process that listens on "
        f"an address of its own, or on the same tcp address with tcp_reuseport=True in every "
        f"process (the kernel then spreads the connections among them)")
    sock._closed = True
    counters.forget(sock)
    sock._proto.close()


def inherited_error(sock: "Socket") -> Closed | None:
    """A new error like the one that closed ``sock`` in this forked child, if one did."""
    why = sock._inherited
    return None if why is None else type(why)(str(why))
