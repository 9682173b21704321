"""gsp.testing itself: the pytest plugin's cost and fixtures, and that the suites fail on
transports and protocols that break the contract (each inner run is a pytest subprocess)."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import gsp
import gsp.testing
import gsp.testing.plugin
from gsp.transport import Transport

KIT = Path(gsp.testing.__file__).parent


def test_the_plugin_is_a_pytest11_entry_point(request: pytest.FixtureRequest) -> None:
    eps = [ep for ep in importlib.metadata.entry_points(group="pytest11") if ep.name == "gsp"]
    assert [ep.value for ep in eps] == ["gsp.testing.plugin"]
    assert request.config.pluginmanager.get_plugin("gsp") is gsp.testing.plugin


def test_loading_the_plugin_imports_no_gevent() -> None:
    """What every pytest run of a project with gsp installed pays: no gevent, no hub."""
    code = "import gsp.testing.plugin, sys; assert 'gevent' not in sys.modules, 'gevent imported'"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("name", ["__init__.py", "plugin.py"])
def test_kit_entry_modules_import_only_light_modules_at_load(name: str) -> None:
    """gevent and gsp's core are imported inside fixtures or lazily, never at module level."""
    # (gsp._lazy: the lazy names' helper, which imports ast, importlib, sys and typing only)
    light = {"__future__", "importlib", "os", "shutil", "tempfile", "typing", "pytest",
             "gsp._lazy"}
    tree = ast.parse((KIT / name).read_text())
    for node in tree.body:  # module level only; `if TYPE_CHECKING:` blocks do not run
        if isinstance(node, ast.Import):
            mods = {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            mods = {(node.module or "").split(".")[0]} if node.level == 0 else \
                {"gsp._lazy"} if node.level == 2 and node.module == "_lazy" else {"<relative>"}
        else:
            continue
        assert mods <= light, f"{name} imports {mods - light} when loaded"


def test_public_names_resolve() -> None:
    for name in gsp.testing.__all__:
        assert getattr(gsp.testing, name) is not None
    with pytest.raises(AttributeError):
        _ = gsp.testing.no_such_name


@pytest.mark.plugins("gsp_ws")
def test_free_url(gsp_free_url, gsp_socket) -> None:
    tcp = gsp_free_url("tcp")
    assert tcp.startswith("tcp://127.0.0.1:") and int(tcp.rsplit(":", 1)[1]) > 0
    ipc = gsp_free_url("ipc")
    path = ipc[len("ipc://"):]
    assert len(path) < 100 and os.path.isdir(os.path.dirname(path)) and not os.path.exists(path)
    assert gsp_free_url("inproc") != gsp_free_url("inproc")
    ws = gsp_free_url("ws")  # the gsp-ws transport offers free_url(scheme, directory)
    assert ws.startswith("ws://127.0.0.1:")
    s = gsp_socket("pair")
    for url in (tcp, ipc, gsp_free_url("inproc"), ws, gsp_free_url("tls+tcp")):
        with pytest.raises(gsp.ConnectionRefused):  # nothing listens there yet
            s.dial(url, fail_fast=True)
    assert s.listen(ipc).url == ipc  # and it can be listened on
    with pytest.raises(gsp.InvalidAddress):
        gsp_free_url("nosuch")


class _NoFreeURL(Transport):
    schemes = ("testnofree",)

    def listener(self, url: str, options: Any) -> Any:
        raise gsp.InvalidAddress(url)

    def dialer(self, url: str, options: Any) -> Any:
        raise gsp.InvalidAddress(url)


class _BadFreeURL(_NoFreeURL):
    schemes = ("testbadfree",)

    def free_url(self, scheme: str, directory: str | None) -> str:
        return "tcp://127.0.0.1:1"  # not of the scheme asked for


class _Plugin:
    @gsp.hookimpl
    def gsp_transports(self) -> list[Transport]:
        return [_NoFreeURL(), _BadFreeURL()]


def test_free_url_of_a_transport_that_cannot_say_fails_clearly(gsp_free_url) -> None:
    plugin = _Plugin()
    gsp.register_plugin(plugin)
    try:
        with pytest.raises(LookupError, match="testnofree.*free_url"):
            gsp_free_url("testnofree")
        with pytest.raises(LookupError, match="gave 'tcp://127.0.0.1:1'"):
            gsp_free_url("testbadfree")
    finally:
        gsp.unregister_plugin(plugin)


def _pytest(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=300)


def test_fixtures_clean_up_after_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(textwrap.dedent("""
        import os
        import gevent
        import gsp

        made = {}

        def test_make(gsp_socket, gsp_spawn, gsp_free_url):
            made["sock"] = gsp_socket("pair", listen="tcp://127.0.0.1:0", recv_timeout=60)
            made["glet"] = gsp_spawn(gevent.sleep, 60)
            made["recv"] = gsp_spawn(made["sock"].recv)
            made["ipc"] = gsp_free_url("ipc")[len("ipc://"):]
            gsp.socket("pull", listen="ipc://" + made["ipc"]).close()

        def test_cleaned_up():
            assert made["sock"].closed
            assert made["glet"].dead and made["recv"].dead
            assert not os.path.exists(os.path.dirname(made["ipc"]))
    """))
    _pytest(pytester).assert_outcomes(passed=2)


def test_leak_check_fails_tests_that_leak(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(textwrap.dedent("""
        import socket

        import gevent
        import gsp
        import pytest

        kept = []

        def test_greenlet(gsp_leak_check):
            kept.append(gevent.spawn(gevent.sleep, 60))

        def test_socket(gsp_leak_check):
            kept.append(gsp.socket("pull", listen="tcp://127.0.0.1:0"))

        def test_fd(gsp_leak_check):
            kept.append(socket.socket())

        @pytest.mark.gsp_allow_leaks
        def test_allowed(gsp_leak_check):
            kept.append(gevent.spawn(gevent.sleep, 60))

        def test_clean(gsp_leak_check, gsp_socket, gsp_spawn):
            s = gsp_socket("pull", listen="tcp://127.0.0.1:0")  # closed before the check
            gsp_spawn(s.recv)

        def test_zz_release():
            for k in kept:
                k.kill() if isinstance(k, gevent.Greenlet) else k.close()
    """))
    result = _pytest(pytester, "-q")
    result.assert_outcomes(passed=6, errors=3)
    sections = result.stdout.str().split("ERROR at teardown of ")[1:]
    by_test = {part.split(" ", 1)[0]: "\n".join(ln for ln in part.splitlines()
                                                if ln.startswith("E "))
               for part in sections}
    assert sorted(by_test) == ["test_fd", "test_greenlet", "test_socket"]
    assert "greenlets left running" in by_test["test_greenlet"]
    assert "fds left open" not in by_test["test_greenlet"]
    assert "greenlets left running" in by_test["test_socket"]
    assert "socket fds left open" in by_test["test_socket"]
    assert "socket fds left open" in by_test["test_fd"]
    assert "greenlets left running" not in by_test["test_fd"]


BROKEN = textwrap.dedent("""
    import gsp
    from gsp.testing import ProtocolSuite, TransportSuite


    class Unlimited:
        \"\"\"testunl://: inproc that ignores max_recv_size (its connections never refuse).\"\"\"

        def __init__(self, conn):
            self.conn = conn

        def __getattr__(self, name):
            return getattr(self.conn, name)

        def recv_messages(self):
            self.conn._max = 0
            return self.conn.recv_messages()


    class Transport(gsp.transport.Transport):
        schemes = ("testunl",)

        def __init__(self):
            self.inner = gsp.registry.transports["inproc"]

        def listener(self, url, options):
            inner = self.inner.listener("inproc://unl/" + url.split("://", 1)[1], options)
            outer = self

            class L(gsp.transport.TransportListener):
                def bind(self):
                    inner.bind()
                    self.url = url

                def accept(self):
                    return Unlimited(inner.accept())

                def close(self):
                    inner.close()
            return L()

        def dialer(self, url, options):
            inner = self.inner.dialer("inproc://unl/" + url.split("://", 1)[1], options)

            class D(gsp.transport.TransportDialer):
                def dial(self):
                    return Unlimited(inner.dial())
            return D()


    class Plugin:
        @gsp.hookimpl
        def gsp_transports(self):
            return [Transport()]


    gsp.register_plugin(Plugin())


    class TestUnlimited(TransportSuite):
        scheme = "testunl"

        def listen_url(self):
            return self._free_url("inproc").replace("inproc", "testunl")


    class TestPushClaimsNotToBlock(ProtocolSuite):
        protocol, peer = "push", "pull"
        can_recv = False
        send_blocks = False  # wrong: push waits for a peer


    class TestPullClaimsToSend(ProtocolSuite):
        protocol, peer = "pull", "push"
        can_send = True  # wrong
""")


def test_suites_fail_what_breaks_the_contract(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(BROKEN)
    result = _pytest(pytester, "-q", "-k", "oversize or timeouts or exchange or not_offered")
    outcomes = result.parseoutcomes()
    failed = {line.split("::", 1)[1].split(" ")[0] for line in result.stdout.lines
              if line.startswith("FAILED")}
    assert {
        "TestUnlimited::test_oversize_message_closes_only_its_pipe",
        "TestUnlimited::test_oversize_message_at_the_dialer",
        "TestPushClaimsNotToBlock::test_timeouts_without_peers[cooked]",
        "TestPushClaimsNotToBlock::test_timeouts_without_peers[raw]",
        "TestPullClaimsToSend::test_exchange[listens]",
    } <= failed, result.stdout.str()[-4000:]
    assert outcomes.get("passed", 0) > 0  # what these implementations do right still passes


SKIPS = textwrap.dedent("""
    from gsp.testing import TransportSuite


    class TestTcpWithoutRawConnect(TransportSuite):
        scheme = "tcp"


    class TestTcpDeclaredNotApplicable(TransportSuite):
        scheme = "tcp"
        not_applicable = {"test_garbage_headers_refused": "no byte stream, really"}

        def raw_connect(self, url):
            import socket
            host, port = url.split("://", 1)[1].rsplit(":", 1)
            return socket.create_connection((host, int(port)))


    class TestInprocDeclaredNotApplicable(TransportSuite):
        scheme = "inproc"
        not_applicable = {"test_garbage_headers_refused": "messages handed over in process"}


    class TestTypoInNotApplicable(TransportSuite):
        scheme = "inproc"
        not_applicable = {"test_garbage_header_refused": "a typo"}
""")


def test_a_check_the_transport_cannot_run_is_reported_skipped_with_its_reason(
        pytester: pytest.Pytester) -> None:
    """No silent pass: a check whose need the suite's subclass does not provide is skipped, and
    pytest says which and why; declaring it not applicable (with a reason) makes it pass, but
    only where the need is really missing; a declaration naming no such check fails."""
    pytester.makepyfile(SKIPS)
    result = _pytest(pytester, "-q", "-rsfE", "-k", "garbage_headers")
    out = result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped") == 1 and outcomes.get("passed") == 1, out[-4000:]
    skipped = [line for line in result.stdout.lines if line.startswith("SKIPPED")]
    assert len(skipped) == 1 and "test_garbage_headers_refused not run: tcp provides no " \
        "raw_connect(url)" in skipped[0] and "not_applicable" in skipped[0], out[-4000:]
    failed = {line.split("::", 1)[1].split(" ")[0] for line in result.stdout.lines
              if line.startswith(("FAILED", "ERROR"))}
    assert failed == {"TestTcpDeclaredNotApplicable::test_garbage_headers_refused",
                      "TestTypoInNotApplicable::test_garbage_headers_refused"}, out[-4000:]
    assert outcomes.get("failed") == 1 and outcomes.get("errors") == 1, out[-4000:]
    assert "remove the declaration" in out and "'test_garbage_header_refused'" in out


def test_gsp_runs_every_check_on_its_transports_but_those_declared_not_applicable() -> None:
    """gsp's own kit runs skip nothing: every transport gsp tests with the kit provides what
    each check needs, except these, declared with their reason (the zlib example's suite, in
    examples/plugins, provides raw_connect too; gsp-ws's suites are checked in its tests)."""
    from tests.transports.test_tls import TestTLSTransport
    from tests.transports.test_transports import (
        TestInprocTransport,
        TestIPCTransport,
        TestTCPTransport,
    )

    suites = [TestTCPTransport, TestIPCTransport, TestInprocTransport, TestTLSTransport]
    declared = {s.scheme: sorted(s.not_applicable) for s in suites if s.not_applicable}
    assert declared == {"inproc": ["test_garbage_headers_refused"]}
    for suite in suites:  # the rest provide raw_connect
        if suite.scheme in ("tcp", "ipc", "tls+tcp"):
            assert suite.raw_connect is not gsp.testing.TransportSuite.raw_connect, suite


BLOCKING = textwrap.dedent("""
    import socket

    import gsp
    from gsp.testing import TransportSuite
    from gsp.transport import (SocketDialer, SocketListener, Transport, bind_stream_socket,
                               parse_host_port, resolve)


    class Listener(SocketListener):
        def bind_socket(self):
            host, port = parse_host_port(self.url, listening=True)
            family, addr = resolve(host, port, True)
            sock = bind_stream_socket(family, addr, f"listen {self.url}")
            self.url = f"tcpblock://127.0.0.1:{sock.getsockname()[1]}"
            return sock


    class Dialer(SocketDialer):
        def connect(self):  # a new user's mistake: the stdlib's blocking socket
            host, port = parse_host_port(self.url, listening=False)
            return socket.create_connection((host, port), timeout=None)


    class BlockingTransport(Transport):
        schemes = ("tcpblock",)
        listener_class = Listener
        dialer_class = Dialer


    class Plugin:
        @gsp.hookimpl
        def gsp_transports(self):
            return [BlockingTransport()]


    gsp.register_plugin(Plugin())


    class TestRawConnectBlocks(TransportSuite):
        scheme = "tcp"

        def raw_connect(self, url):  # a blocking stdlib socket
            host, port = url[len("tcp://"):].rsplit(":", 1)
            return socket.create_connection((host, int(port)))


    class TestDialerBlocks(TransportSuite):
        scheme = "tcpblock"

        def listen_url(self):
            return "tcpblock://127.0.0.1:0"
""")


def test_a_kit_run_against_blocking_sockets_fails_within_30_s_naming_them(
        pytester: pytest.Pytester) -> None:
    # A transport whose raw_connect returns a blocking stdlib socket would hang the kit (15
    # minutes, until pytest's timeout). The kit checks what the hooks return (raw_connect; the dialer's dial),
    # and a check whose blocking call stalls the hub is interrupted by the kit's watchdog
    # (kit_stall_limit, 5 s) with the same cause and where it blocked.
    pytester.makepyfile(test_blocking=BLOCKING)
    result = _pytest(pytester, "-q", "test_blocking.py::TestRawConnectBlocks::"
                     "test_garbage_headers_refused", "test_blocking.py::TestDialerBlocks::"
                     "test_handshake_timeout", "test_blocking.py::TestDialerBlocks::test_send_recv")
    out = result.stdout.str()
    result.assert_outcomes(failed=3, errors=1)
    # The session's own time, as pytest reports it (the interpreter's start and the collection
    # come before; they take seconds on a busy machine).
    took = float(re.findall(r" in ([0-9.]+)s", out)[-1])
    assert took < 30, f"the kit took {took:.1f} s to fail\n{out}"
    assert "TestRawConnectBlocks.raw_connect('tcp://127.0.0.1:" in out
    assert "returned a socket.socket: not a gevent socket: blocking calls stall the hub" in out
    assert "the tcpblock transport's dialer's dial() (its .sock) returned a socket.socket" in out
    # The check that only dials and sends: the hub stalled in the dialer's handshake.
    assert "TestDialerBlocks.test_send_recv: the event loop (gevent's hub) did not run" in out
    assert "not a gevent socket: blocking calls stall the hub" in out.split(
        "TestDialerBlocks.test_send_recv: the event loop")[1]
