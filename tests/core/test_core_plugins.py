"""Behavioural acceptance tests of the socket core's plugins: an unknown protocol lists the
installed ones, a registered third-party transport is usable and removable, entry points autoload
(unless disabled), and what only a third-party transport can bring: a connect that never completes
(bounded by handshake_timeout) and slow connection closes (run concurrently by close). One of the
core suites (see test_core.py)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from typing import Any

import gevent
import gevent.event
import pytest
from gevent import subprocess

import gsp
from gsp.testing import WAIT, connected, wait_for
from gsp.transport import Transport, TransportListener
from tests.support import plugged_transports, scaled

# -- plugins ---------------------------------------------------------------------------------------

def test_unknown_protocol_lists_installed_ones():
    with pytest.raises(gsp.UnknownPlugin) as info:
        gsp.socket("no-such-protocol")
    assert isinstance(info.value, LookupError)
    assert {"pair", "push", "pull"} <= set(gsp.protocol_names())
    for name in gsp.protocol_names():
        assert name in str(info.value)


@pytest.mark.parametrize(("old", "new", "value"), [
    ("gsp.protocols", "gsp.protocol_names", lambda: gsp.protocol_names),
    ("gsp.transports", "gsp.transport_schemes", lambda: gsp.transport_schemes),
    ("gsp.protocol.hookimpl", "gsp.hookimpl", lambda: gsp.hookimpl),
    ("gsp.transport.hookimpl", "gsp.hookimpl", lambda: gsp.hookimpl),
    ("gsp.transport.overrides", "gsp.protocol.overrides", lambda: gsp.protocol.overrides),
    ("gsp.overrides.overrides", "gsp.protocol.overrides", lambda: gsp.protocol.overrides),
])
def test_an_old_spelling_works_and_warns_naming_the_new_one(old: str, new: str,
                                                            value: Any) -> None:
    # The names that moved to their one home keep working for one minor version.
    import importlib

    module, _, name = old.rpartition(".")
    with pytest.warns(DeprecationWarning, match=f"^{old} is deprecated: use {new}$") as warned:
        got = getattr(importlib.import_module(module), name)
    assert got is value()
    assert [w.filename for w in warned] == [__file__]  # the warning points at the caller
    assert name not in getattr(importlib.import_module(module), "__all__", ())
    if old == "gsp.protocols":
        with pytest.warns(DeprecationWarning):
            assert gsp.protocols() == gsp.protocol_names()  # type: ignore[attr-defined]


class _RenamedListener(TransportListener):
    def __init__(self, inner: TransportListener, url: str) -> None:
        self.inner, self.url = inner, url

    def bind(self) -> None:
        self.inner.bind()

    def accept(self) -> Any:
        return self.inner.accept()

    def close(self) -> None:
        self.inner.close()


class _MemTransport(Transport):
    """A third-party transport: scheme testmem://, carried by inproc."""

    schemes = ("testmem",)

    def __init__(self) -> None:
        self.inner = gsp.registry.transports["inproc"]

    def inner_url(self, url: str) -> str:
        return "inproc://testmem/" + url.split("://", 1)[1]

    def listener(self, url: str, options: Any) -> TransportListener:
        return _RenamedListener(self.inner.listener(self.inner_url(url), options), url)

    def dialer(self, url: str, options: Any) -> Any:
        return self.inner.dialer(self.inner_url(url), options)


class _MemPlugin:
    @gsp.hookimpl
    def gsp_transports(self) -> list[Transport]:
        return [_MemTransport()]


def test_registered_transport_plugin_is_usable_and_removable(gsp_socket):
    plugin = _MemPlugin()
    assert "testmem" not in gsp.transport_schemes()
    gsp.register_plugin(plugin)
    try:
        assert "testmem" in gsp.transport_schemes()
        a = gsp_socket("pair", recv_timeout=WAIT)
        b = gsp_socket("pair")
        lst = a.listen("testmem://here")
        assert lst.url == "testmem://here"
        connected(a, lst.url, b)
        b.send(b"through a plugin")
        assert a.recv() == b"through a plugin"
    finally:
        gsp.unregister_plugin(plugin)
    assert "testmem" not in gsp.transport_schemes()
    s = gsp_socket("pair")
    with pytest.raises(gsp.InvalidAddress):
        s.listen("testmem://here")


FAKE_PLUGIN = textwrap.dedent("""
    import gsp
    from gsp.transport import Transport

    class FakeTransport(Transport):
        schemes = ("fakex",)
        def listener(self, url, options): raise gsp.InvalidAddress(url)
        def dialer(self, url, options): raise gsp.InvalidAddress(url)

    @gsp.hookimpl
    def gsp_transports():
        return [FakeTransport()]
""")
REPORT = textwrap.dedent("""
    import json, gsp
    with gsp.socket("pull", listen="inproc://x", recv_timeout=5) as pull:
        with gsp.socket("push", dial="inproc://x") as push:
            push.send(b"ok")
            assert pull.recv() == b"ok"
    print(json.dumps([gsp.transport_schemes(), gsp.protocol_names()]))
""")


@pytest.mark.parametrize("disable", [False, True])
def test_autoload_of_third_party_entry_points(disable, tmp_path):
    (tmp_path / "fakeplug_mod.py").write_text(FAKE_PLUGIN)
    info = tmp_path / "fakeplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[gsp]\nfakex = fakeplug_mod\n")
    env = {k: v for k, v in os.environ.items() if k != "GSP_DISABLE_PLUGIN_AUTOLOAD"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *sys.path])
    if disable:
        env["GSP_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    out = subprocess.run([sys.executable, "-c", REPORT], env=env, capture_output=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    transports, protocols = json.loads(out.stdout)
    assert {"tcp", "ipc", "inproc"} <= set(transports)
    assert {"pair", "push", "pull"} <= set(protocols)
    assert ("fakex" in transports) is not disable


class _StallDialer:
    """A dialer whose connect never completes (a black-holed address)."""

    def dial(self) -> Any:
        gevent.event.Event().wait()  # set by nothing: the dial is cut by handshake_timeout

    def close(self) -> None:
        pass


class _StallPlugin:
    class T(Transport):
        schemes = ("teststall",)

        def listener(self, url: str, options: Any) -> Any:
            raise gsp.InvalidAddress(url)

        def dialer(self, url: str, options: Any) -> Any:
            return _StallDialer()

    @gsp.hookimpl
    def gsp_transports(self) -> list[Transport]:
        return [self.T()]


def test_a_connect_that_never_completes_is_bounded_by_handshake_timeout(gsp_socket):
    plugin = _StallPlugin()
    gsp.register_plugin(plugin)
    try:
        s = gsp_socket("push", handshake_timeout=0.2)
        t0 = time.monotonic()
        with pytest.raises(gsp.Timeout):
            s.dial("teststall://nowhere", fail_fast=True)
        assert time.monotonic() - t0 < scaled(1.0)
    finally:
        gsp.unregister_plugin(plugin)


class _SlowCloseTransport(_MemTransport):
    """inproc underneath, but every connection's close waits a while (like ws awaiting its
    peer); ``closes`` records when each close begins and ends."""

    schemes = ("testslowclose",)

    def __init__(self) -> None:
        super().__init__()
        self.closes: list[str] = []

    def inner_url(self, url: str) -> str:
        return "inproc://testslowclose/" + url.split("://", 1)[1]

    def dialer(self, url: str, options: Any) -> Any:
        inner = self.inner.dialer(self.inner_url(url), options)
        closes = self.closes

        class D:
            def dial(self) -> Any:
                conn = inner.dial()
                close = conn.close

                def slow_close() -> None:
                    closes.append("begin")
                    gevent.sleep(0.05)
                    close()
                    closes.append("end")
                conn.close = slow_close
                return conn

            def close(self) -> None:
                inner.close()
        return D()


def test_close_shuts_pipes_down_concurrently(gsp_socket):
    transport = _SlowCloseTransport()
    with plugged_transports(transport):
        pull = gsp_socket("pull")
        url = pull.listen("testslowclose://here").url
        push = gsp.socket("push", linger=0)
        try:
            for _ in range(5):
                push.dial(url, fail_fast=True)
            wait_for(lambda: len(push.pipes) == 5, what="5 pipes")
        finally:
            push.close()
        # Every close began before the first one ended; one after another would alternate.
        assert transport.closes == ["begin"] * 5 + ["end"] * 5
