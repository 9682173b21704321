"""``gsp cat``'s work: one socket, its endpoints, and nngcat's send/receive loops."""

from __future__ import annotations

import time
from typing import BinaryIO, TextIO

import gevent

import gsp

from ._args import Config
from ._formats import FORMATS

__all__ = ["run"]


def _fmt_seconds(s: float) -> str:
    return f"{s:g} s"


class _Cat:
    def __init__(self, cfg: Config, sock: gsp.Socket, out: BinaryIO, err: TextIO) -> None:
        self.cfg = cfg
        self.sock = sock
        self.out = out
        self.err = err
        self.format = FORMATS[cfg.fmt]
        self.received = 0
        self.sent = 0

    # -- one message -----------------------------------------------------------------------
    def emit(self, body: bytes) -> None:
        self.received += 1
        try:
            text = self.format(body)
        except gsp.BadMessage as exc:  # --object and a body that is no msgpack: say, go on
            if self.cfg.verbose >= 0:
                print(f"gsp cat: message {self.received}: {exc}", file=self.err, flush=True)
            return
        if text:
            self.out.write(text)
            self.out.flush()

    def send(self) -> None:
        assert self.cfg.data is not None
        self.sock.send(self.cfg.data)
        self.sent += 1

    def recv(self, timeout: float | None) -> bytes | None:
        """One body, or None when receiving is over: a timeout, or a protocol state that ends
        it (REQ's reply came, a survey was replaced), or a send-only peer protocol."""
        if self.sock.recv_timeout != timeout:
            self.sock.recv_timeout = timeout
        try:
            return self.sock.recv()
        except (gsp.Timeout, gsp.WouldBlock, gsp.ProtocolStateError):
            return None
        except gsp.NotSupported:
            if self.sent:
                return None
            raise

    def recv_some(self, limit: int, until: float | None = None) -> None:
        """Print messages until ``limit`` of them (0: no limit) or receiving is over; with
        ``until`` (a time.monotonic() deadline) also when it passes."""
        n = 0
        cap = self.cfg.recv_timeout
        while not limit or n < limit:
            timeout = cap
            if until is not None:
                left = max(0.0, until - time.monotonic())
                timeout = left if cap is None else min(cap, left)
            body = self.recv(timeout)
            if body is None:
                return
            self.emit(body)
            n += 1

    # -- nngcat's loops --------------------------------------------------------------------
    def send_loop(self) -> None:
        """push, pub: send --count times (once by default; forever with --interval alone)."""
        cfg = self.cfg
        gevent.sleep(cfg.delay)
        while True:
            start = time.monotonic()
            self.send()
            if cfg.count and self.sent >= cfg.count or not cfg.count and cfg.interval is None:
                return
            self.pause(start)

    def reply_loop(self) -> None:
        """rep, respondent with --data: print each request, answer it with the data."""
        while not self.cfg.count or self.sent < self.cfg.count:
            body = self.recv(self.cfg.recv_timeout)
            if body is None:
                return
            self.emit(body)
            self.send()

    def ask_loop(self) -> None:
        """req, surveyor, and peers with --data: send, then print what comes back; with
        --interval or --count, again every interval until --count sends."""
        cfg = self.cfg
        gevent.sleep(cfg.delay)
        if cfg.interval is None and not cfg.count:
            self.send()
            self.recv_some(0)
            return
        while True:
            start = time.monotonic()
            self.send()
            until = None if cfg.interval is None else start + cfg.interval
            self.recv_some(0, until)
            if cfg.count and self.sent >= cfg.count:
                return
            self.pause(start)

    def pause(self, start: float) -> None:
        if self.cfg.interval:
            gevent.sleep(max(0.0, start + self.cfg.interval - time.monotonic()))

    def run(self) -> None:
        cfg = self.cfg
        role = cfg.role
        if role == "sender":
            self.send_loop()
            return
        if role == "asker" or (role == "peer" and cfg.data is not None):
            self.ask_loop()
        elif role == "replier" and cfg.data is not None:
            self.reply_loop()
        else:
            self.recv_some(cfg.count)
        if cfg.recv_timeout is not None and self.received == 0:
            raise gsp.Timeout(f"nothing received within --recv-timeout "
                                  f"{_fmt_seconds(cfg.recv_timeout)}")


def run(cfg: Config, out: BinaryIO, err: TextIO) -> None:
    """Open the socket, dial and listen in order, run the protocol's loop, close (flushing
    what is queued for up to ``linger``). gsp errors propagate."""
    with gsp.socket(cfg.protocol, **cfg.options) as sock:
        for prefix in cfg.subscribe or ([b""] if cfg.protocol == "sub" else []):
            sock.subscribe(prefix)
        for mode, url in cfg.addrs:
            if mode == "listen":
                listener = sock.listen(url)
                if cfg.verbose > 0:
                    print(f"Listening at: {listener.url}", file=err, flush=True)
            else:
                sock.dial(url, fail_fast=not cfg.async_dial)
                if cfg.verbose > 0 and not cfg.async_dial:
                    print(f"Connected to: {url}", file=err, flush=True)
        _Cat(cfg, sock, out, err).run()
