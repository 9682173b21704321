"""gsp.js, the browser SP client, in a real headless Chromium against real gsp sockets.

Each test opens a page served by gevent.pywsgi with the WSGI mount (tests/support/browser_support.py);
the page imports the module from the mount (``/sp/gsp.js``) and talks SP to gsp sockets mounted
beside it. One browser for the module, many checks a page. Every protocol pair runs both ways
(the page's socket of each protocol against a gsp socket of its peer protocol), each with
messages of 0 bytes, of every byte value and of over 64 KiB (gsp cuts those into 64 KiB
frames, as nng does; the browser joins them).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator

import gevent
import gevent.event
import pytest

import gsp
from gsp_ws.js import client_source
from tests.support import servers
from tests.support.browser_support import Browser, Page, PageServer, page_server, wait_pipes

pytestmark = pytest.mark.browser

#: Bodies every pair carries: empty, every byte value once, and 100,000 bytes (> 64 KiB).
PAYLOADS = [b"", bytes(range(256)), bytes((i * 7 + 3) & 0xFF for i in range(100_000))]
HEX = [p.hex() for p in PAYLOADS]


@pytest.fixture
def server() -> Iterator[PageServer]:
    with page_server() as srv:
        yield srv


@pytest.fixture
def page(browser: Browser, server: PageServer) -> Iterator[Page]:
    p = browser.page(server.url)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def mounted(server: PageServer) -> Iterator[Callable[..., gsp.Socket]]:
    """``mounted(protocol, path)``: a gsp socket mounted at ``path``, closed after the test."""
    socks: list[gsp.Socket] = []

    def make(protocol: str, path: str, **options: Any) -> gsp.Socket:
        s = gsp.socket(protocol, max_recv_size=0, recv_timeout=10, send_timeout=10)
        socks.append(s)
        server.mount(s, path, **options)
        return s
    yield make
    for s in socks:
        s.close()


# -- the module and its import ------------------------------------------------------------------

def test_the_mount_serves_the_module_the_page_imports(page: Page, server: PageServer) -> None:
    got = page.run("""
        const r = await fetch("/sp/gsp.js");
        const text = await r.text();
        return {status: r.status, type: r.headers.get("content-type"), size: text.length,
                names: Object.keys(gsp).sort(), etag: r.headers.get("etag")};
    """)
    assert got["status"] == 200
    assert got["type"] == "text/javascript; charset=utf-8"
    assert got["size"] == len(client_source().decode())
    assert {"socket", "Socket", "Context", "Timeout", "Closed", "ProtocolError",
            "ConnectionRefused", "GspError", "codec"} <= set(got["names"])
    assert len(client_source()) < 40 * 1024, "the module must stay under 40 KB unminified"


#: Opens a bare WebSocket to ``arg`` from the page: "open" or "refused".
OPEN_WEBSOCKET = """
    return await new Promise((done) => {
        const ws = new WebSocket(arg, "rep.sp.nanomsg.org");
        ws.onopen = () => { ws.close(); done("open"); };
        ws.onerror = () => done("refused");
    });
"""


def test_a_page_of_another_origin_cannot_open_a_mount_unless_the_mount_allows_it(
        page: Page, server: PageServer, caplog: pytest.LogCaptureFixture) -> None:
    """A mount serves its own origin's pages; a page of another origin (another port) is
    refused its upgrade, and the server's log says how to allow it. With that origin in
    ``ws_origins`` the page imports gsp.js from the mount and talks through it."""
    mine = server.url.rstrip("/")
    assert page.run(OPEN_WEBSOCKET, server.ws("/sp")) == "open"  # same origin
    with page_server() as other, caplog.at_level(logging.WARNING, "gsp.listener"):
        assert page.run(OPEN_WEBSOCKET, other.ws("/sp")) == "refused"
        assert not other.echo.pipes
    told = [r.getMessage() for r in caplog.records
            if "refused a WebSocket upgrade from a page of " + mine in r.getMessage()]
    assert told and f"pass ws_origins={{{mine!r}}} to mount() or listen()" in told[0]
    with page_server(ws_origins={mine}) as allowing:
        assert page.run(OPEN_WEBSOCKET, allowing.ws("/sp")) == "open"
        got = page.run("""
            const mod = await import(arg.module);
            const req = mod.socket("req", {recvTimeout: 10});
            await req.dial(arg.url);
            await req.send("from elsewhere");
            const reply = await req.recvText();
            req.close();
            return {reply, origin: location.origin};
        """, {"module": allowing.url + "sp/gsp.js", "url": allowing.ws("/sp")})
    assert got == {"reply": "from elsewhere", "origin": mine}


# -- every protocol pair, both ways -------------------------------------------------------------

def test_req_page_against_gsp_rep(page: Page, server: PageServer) -> None:
    got = page.run("""
        const req = gsp.socket("req", {recvTimeout: 10, sendTimeout: 10});
        await req.dial(arg.url);
        const out = [];
        for (const h of arg.bodies) { await req.send(unhex(h)); out.push(hex(await req.recv())); }
        await req.send("héllo");
        out.push(await req.recvText());
        req.close();
        return out;
    """, {"url": server.ws("/sp"), "bodies": HEX})
    assert got == [*HEX, "héllo"]


def echo_script(protocol: str, count: int) -> str:
    """The page dials ``arg`` and sends back each of ``count`` messages it receives."""
    return f"""
        const s = gsp.socket("{protocol}", {{recvTimeout: 10}});
        await s.dial(arg);
        for (let i = 0; i < {count}; i++) await s.send(await s.recv());
        s.close();
    """


def gsp_asks(sock: gsp.Socket, bodies: list[bytes]) -> gevent.Greenlet:
    """Once the page is connected, send each of ``bodies`` and take its answer; the greenlet's
    value is the answers."""
    def run() -> list[bytes]:
        wait_pipes(sock)
        answers = []
        for b in bodies:
            sock.send(b)
            answers.append(sock.recv())
        return answers
    return gevent.spawn(run)


def test_rep_page_against_gsp_req(page: Page, server: PageServer,
                                  mounted: Callable[..., gsp.Socket]) -> None:
    req = mounted("req", "/req")
    g = gsp_asks(req, PAYLOADS)
    page.run(echo_script("rep", len(PAYLOADS)), server.ws("/req"))
    assert g.get(timeout=10) == PAYLOADS


def sender_script(protocol: str) -> str:
    return f"""
        const s = gsp.socket("{protocol}", {{sendTimeout: 10}});
        await s.dial(arg.url);
        for (const h of arg.bodies) await s.send(unhex(h));
        await new Promise((r) => setTimeout(r, 200));  // let the browser flush before close
        s.close();
    """


def receiver_script(protocol: str, setup: str = "") -> str:
    return f"""
        const s = gsp.socket("{protocol}", {{recvTimeout: 10}});
        {setup}
        await s.dial(arg.url);
        const out = [];
        for (let i = 0; i < arg.count; i++) out.push(hex(await s.recv()));
        s.close();
        return out;
    """


def gsp_receives(sock: gsp.Socket, count: int) -> gevent.Greenlet:
    return gevent.spawn(lambda: [sock.recv() for _ in range(count)])


def gsp_sends(sock: gsp.Socket, bodies: list[bytes]) -> gevent.Greenlet:
    def run() -> None:
        wait_pipes(sock)
        for b in bodies:
            sock.send(b)
    return gevent.spawn(run)


@pytest.mark.parametrize("page_proto, gsp_proto", [
    ("push", "pull"), ("pair", "pair"), ("pair1", "pair1"), ("bus", "bus"), ("pub", "sub")])
def test_page_sends_to_gsp(page: Page, server: PageServer, mounted: Callable[..., gsp.Socket],
                           page_proto: str, gsp_proto: str) -> None:
    sock = mounted(gsp_proto, "/peer")
    if gsp_proto == "sub":
        sock.subscribe(b"")
    g = gsp_receives(sock, len(PAYLOADS))
    page.run(sender_script(page_proto), {"url": server.ws("/peer"), "bodies": HEX})
    assert g.get(timeout=10) == PAYLOADS


@pytest.mark.parametrize("page_proto, gsp_proto", [
    ("pull", "push"), ("pair", "pair"), ("pair1", "pair1"), ("bus", "bus"), ("sub", "pub")])
def test_gsp_sends_to_page(page: Page, server: PageServer, mounted: Callable[..., gsp.Socket],
                           page_proto: str, gsp_proto: str) -> None:
    sock = mounted(gsp_proto, "/peer")
    setup = 's.subscribe("");' if page_proto == "sub" else ""
    g = gsp_sends(sock, PAYLOADS)
    got = page.run(receiver_script(page_proto, setup),
                   {"url": server.ws("/peer"), "count": len(PAYLOADS)})
    g.get(timeout=10)
    assert got == HEX


def test_sub_filters_by_prefix_in_the_page(page: Page, server: PageServer,
                                           mounted: Callable[..., gsp.Socket]) -> None:
    pub = mounted("pub", "/pub")
    bodies = [b"x.skip", b"ticks.1", b"tick", b"ticks.", b"other", b"\x00bin", b"ticks.2"]
    g = gsp_sends(pub, bodies)
    got = page.run("""
        const s = gsp.socket("sub", {recvTimeout: 10});
        s.subscribe("ticks."); s.subscribe(new Uint8Array([0]));
        s.subscribe("gone"); s.unsubscribe("gone");
        await s.dial(arg);
        const out = [];
        for (let i = 0; i < 4; i++) out.push(hex(await s.recv()));
        let extra = "none";
        try { await s.recv({timeout: 0.3}); extra = "got one"; } catch (e) { extra = e.name; }
        s.close();
        return {out, extra};
    """, server.ws("/pub"))
    g.get(timeout=10)
    assert got["out"] == [b"ticks.1".hex(), b"ticks.".hex(), b"\x00bin".hex(), b"ticks.2".hex()]
    assert got["extra"] == "Timeout"


def test_sub_contexts_each_get_what_they_subscribed_to(page: Page, server: PageServer,
                                                      mounted: Callable[..., gsp.Socket]) -> None:
    pub = mounted("pub", "/pub")
    g = gsp_sends(pub, [b"a1", b"b1", b"c1", b"a2"])
    got = page.run("""
        const s = gsp.socket("sub", {recvTimeout: 10});
        s.subscribe("");
        const a = s.openContext(), b = s.openContext(), none = s.openContext();
        a.subscribe("a"); b.subscribe("b"); b.subscribe("a2");
        await s.dial(arg);
        const take = async (ctx, n) => {
            const out = [];
            for (let i = 0; i < n; i++) out.push(await ctx.recvText());
            return out;
        };
        const out = {main: await take(s, 4), a: await take(a, 2), b: await take(b, 2)};
        try { await none.recv({timeout: 0.2}); out.none = "got one"; } catch (e) { out.none = e.name; }
        let push = "none";
        try { gsp.socket("push").openContext().subscribe("x"); } catch (e) { push = e.name; }
        out.push = push;
        s.close();
        return out;
    """, server.ws("/pub"))
    g.get(timeout=10)
    assert got == {"main": ["a1", "b1", "c1", "a2"], "a": ["a1", "a2"], "b": ["b1", "a2"],
                   "none": "Timeout", "push": "NotSupported"}


def test_surveyor_page_against_gsp_respondent(page: Page, server: PageServer,
                                              mounted: Callable[..., gsp.Socket]) -> None:
    resp = mounted("respondent", "/resp")

    def answer() -> None:
        for _ in PAYLOADS:
            resp.send(resp.recv())
    g = gevent.spawn(answer)
    got = page.run("""
        const s = gsp.socket("surveyor", {surveyTime: 5});
        await s.dial(arg.url);
        const out = [];
        for (const h of arg.bodies) { await s.send(unhex(h)); out.push(hex(await s.recv())); }
        // after the survey's time, recv says Timeout; with no survey, ProtocolError
        s.surveyTime = 0.2;
        await s.send("nobody answers this");
        let late = "none";
        try { await s.recv(); } catch (e) { late = e.name; }
        const fresh = gsp.socket("surveyor");
        let none = "none";
        try { await fresh.recv(); } catch (e) { none = e.name; }
        s.close(); fresh.close();
        return {out, late, none};
    """, {"url": server.ws("/resp"), "bodies": HEX})
    g.get(timeout=10)
    assert got == {"out": HEX, "late": "Timeout", "none": "ProtocolError"}


def test_respondent_page_against_gsp_surveyor(page: Page, server: PageServer,
                                              mounted: Callable[..., gsp.Socket]) -> None:
    surveyor = mounted("surveyor", "/surveyor", )
    surveyor.survey_time = 10
    g = gsp_asks(surveyor, PAYLOADS)
    page.run(echo_script("respondent", len(PAYLOADS)), server.ws("/surveyor"))
    assert g.get(timeout=10) == PAYLOADS


# -- req in depth -------------------------------------------------------------------------------

def test_a_thousand_requests_from_ten_contexts_are_all_answered(page: Page,
                                                                 server: PageServer) -> None:
    got = page.run("""
        const req = gsp.socket("req", {recvTimeout: 20, sendTimeout: 10});
        await req.dial(arg);
        const answered = await Promise.all(Array.from({length: 10}, async (_, c) => {
            const ctx = req.openContext();
            let ok = 0;
            for (let i = 0; i < 100; i++) {
                const body = `ctx ${c} request ${i}`;
                await ctx.send(body);
                if ((await ctx.recvText()) === body) ok++;
            }
            ctx.close();
            return ok;
        }));
        req.close();
        return answered;
    """, server.ws("/sp"))
    assert got == [100] * 10


def test_req_resends_after_resend_time(page: Page, server: PageServer,
                                       mounted: Callable[..., gsp.Socket]) -> None:
    rep = mounted("rep", "/slow")
    seen: list[bytes] = []

    def answer_the_second_copy() -> None:
        seen.append(rep.recv())  # the first copy is received and never answered
        seen.append(rep.recv())  # the resend: a new receive of the same request
        rep.send(b"answered " + seen[-1])
    g = gevent.spawn(answer_the_second_copy)
    got = page.run("""
        const req = gsp.socket("req", {resendTime: 0.3, recvTimeout: 10});
        await req.dial(arg);
        await req.send("once");
        const reply = await req.recvText();
        let state = "none";
        try { await req.recv({timeout: 0.1}); } catch (e) { state = e.name; }
        req.close();
        return {reply, state};
    """, server.ws("/slow"))
    g.get(timeout=10)
    assert seen == [b"once", b"once"]
    assert got == {"reply": "answered once", "state": "ProtocolError"}


def test_errors_say_what_happened(page: Page, server: PageServer) -> None:
    got = page.run("""
        const names = {};
        const tryIt = async (key, f) => {
            try { await f(); names[key] = "no error"; }
            catch (e) { names[key] = `${e.name}${e instanceof gsp.GspError ? "" : " (not GspError)"}`; }
        };
        const req = gsp.socket("req", {sendTimeout: 0.2, recvTimeout: 0.2});
        await tryIt("send, no peer", () => req.send("x"));
        await tryIt("recv, no request", () => req.recv());
        await req.dial(arg.url);
        const ctx = req.openContext();
        await tryIt("context recv, no request", () => ctx.recv());
        const sub = gsp.socket("sub");
        await tryIt("send on sub", () => sub.send("x"));
        await tryIt("recv on push", () => gsp.socket("push").recv());
        await tryIt("context on pull", () => gsp.socket("pull").openContext());
        await tryIt("bad option", () => gsp.socket("req", {recvTimeout: -1}));
        await tryIt("bad context time", () => { ctx.recvTimeout = "5"; });
        ctx.recvTimeout = null;  // forever, not the socket's 0.2 s
        const forever = ctx.recvTimeout === null && ctx.sendTimeout === undefined;
        ctx.recvTimeout = undefined;  // the socket's again
        names["context times"] = forever && ctx.recvTimeout === undefined ? "ok" : "wrong";
        await tryIt("no protocol", () => gsp.socket("nope"));
        await tryIt("bad url", () => req.dial("ftp://example.invalid/"));
        await tryIt("nobody there", () => gsp.socket("req").dial(arg.dead, {failFast: true}));
        await tryIt("wrong path", () => gsp.socket("req").dial(arg.wrong, {failFast: true}));
        await tryIt("unknown dial option", () => gsp.socket("req").dial(arg.url, {fail_fast: true}));
        await tryIt("failFast and background", () => gsp.socket("req").dial(arg.url,
                                                       {failFast: true, background: true}));
        const pull = gsp.socket("pull");
        const pending = pull.recv({timeout: 5}).catch((e) => e.name);
        pull.close();
        names["recv when closed"] = await pending;
        req.close();
        await tryIt("send after close", () => req.send("x"));
        return names;
    """, {"url": server.ws("/sp"), "dead": "ws://127.0.0.1:9/sp",
          "wrong": server.ws("/no-such-mount")})
    assert got == {
        "send, no peer": "Timeout", "recv, no request": "ProtocolError",
        "context recv, no request": "ProtocolError", "send on sub": "NotSupported",
        "recv on push": "NotSupported", "context on pull": "NotSupported",
        "bad option": "BadOption", "bad context time": "BadOption", "context times": "ok",
        "no protocol": "NotSupported", "bad url": "InvalidAddress",
        "nobody there": "ConnectionRefused", "wrong path": "ConnectionRefused",
        "unknown dial option": "BadOption", "failFast and background": "BadOption",
        "recv when closed": "Closed", "send after close": "Closed"}


def test_refused_ws_authorize_is_an_error_in_the_page(browser: Browser, server: PageServer,
                                                      mounted: Callable[..., Any]) -> None:
    import gsp_ws

    def by_cookie(request: gsp.transport.WSRequest) -> gsp_ws.Refusal | None:
        if request.cookies.get("session") != "s3cret":
            return gsp_ws.Refusal(401, "log in first")
        return None
    mounted("rep", "/private", ws_authorize=by_cookie)
    script = """
        const req = gsp.socket("req", {recvTimeout: 5});
        try { await req.dial(arg, {failFast: true}); } catch (e) { return `${e.name}: ${e.message}`; }
        req.close();
        return "connected";
    """
    anonymous = browser.page(server.url)
    try:
        refused = anonymous.run(script, server.ws("/private"))
    finally:
        anonymous.close()
    assert refused.startswith("ConnectionRefused: dial ws://127.0.0.1:")
    member = browser.page(server.url, cookies=[{"name": "session", "value": "s3cret",
                                                "url": server.url}])
    try:
        assert member.run(script, server.ws("/private")) == "connected"
    finally:
        member.close()


def test_reconnects_after_the_server_restarts(browser: Browser) -> None:
    """The page's dialer redials the restarted server; a request that was waiting for its
    reply when the connection went is sent again on the new one (not after resendTime, 60 s)
    and answered there."""
    srv = PageServer()
    port = srv.port
    silent = gsp.socket("rep")  # receives the request and never answers it
    srv.mount(silent, "/slow")
    page = browser.page(srv.url)
    try:
        page.run("""
            const opts = {recvTimeout: 20, sendTimeout: 20, reconnectTime: 0.05,
                          maxReconnectTime: 0.5};
            const req = gsp.socket("req", opts);
            window.events = [];
            req.onPipe((ev) => window.events.push(ev.type));
            await req.dial(arg.sp);
            await req.send("before");
            window.before = await req.recvText();
            window.req = req;
            window.waiting = gsp.socket("req", opts);
            await window.waiting.dial(arg.slow);
            await window.waiting.send("pending");
            window.pending = window.waiting.recvText();
        """, {"sp": srv.ws("/sp"), "slow": srv.ws("/slow")})
        assert silent.recv(timeout=10) == b"pending"
        srv.stop()
        silent.close()
        page.wait_for("window.events.includes('disconnect')")
        srv = PageServer(port)  # the same address, a new server and new sockets
        echo = gsp.socket("rep")
        srv.mount(echo, "/slow")
        answer = gevent.spawn(lambda: echo.send(b"answered " + echo.recv(timeout=20)))
        got = page.run("""
            await window.req.send("after");
            const after = await window.req.recvText();
            const pending = await window.pending;
            window.req.close(); window.waiting.close();
            return {before: window.before, after, pending, events: window.events};
        """)
        answer.get(timeout=10)
        echo.close()
        assert got == {"before": "before", "after": "after", "pending": "answered pending",
                       "events": ["connect", "disconnect", "connect"]}
    finally:
        page.close()
        srv.stop()
        silent.close()


# -- dialing: the default keeps redialing, failFast, background -------------------------------

@pytest.mark.parametrize("comes_up", ["mount", "ws-listener"])
def test_a_page_loaded_while_the_server_is_down_connects_when_it_comes_up(
        page: Page, server: PageServer, comes_up: str) -> None:
    """docs/browsers.md's first page, with dial()'s defaults, loaded while nothing listens at its
    SP address (a deploy): dial() returns after the failed first attempt and keeps redialing;
    once a WSGI mount (or a gsp ws:// listener) comes up there, the page connects and receives
    what the PUB sends."""
    port = servers.free_port()
    url = f"ws://127.0.0.1:{port}/ticks"
    first = page.run("""
        const sub = gsp.socket("sub", {reconnectTime: 0.05, maxReconnectTime: 0.5});
        sub.subscribe("tick ");
        window.sub = sub;
        const d = await sub.dial(arg);  // the first attempt fails: nothing listens
        window.tick = sub.recvText();
        return {pipes: sub.pipes.length, url: d.url};
    """, url)
    assert first == {"pipes": 0, "url": url}
    pub = gsp.socket("pub")
    attached = gevent.event.Event()
    pub.on_pipe_event(lambda ev, pipe: ev is gsp.PipeEvent.ATTACHED and attached.set())
    origin = server.url.rstrip("/")  # the page's origin: another port, so another origin
    up = None
    try:
        if comes_up == "mount":
            up = PageServer(port)
            up.mount(pub, "/ticks", ws_origins={origin})
        else:
            pub.listen(url, ws_origins={origin})
        assert attached.wait(timeout=30), "the page did not redial (it redials every <= 0.5 s)"
        pub.send(b"tick 1")
        assert page.run("const t = await window.tick; window.sub.close(); return t;") == "tick 1"
    finally:
        pub.close()
        if up is not None:
            up.stop()


def test_fail_fast_rejects_when_nothing_listens_and_stops(page: Page) -> None:
    """{failFast: true} against an address whose server answers no upgrade rejects with
    ConnectionRefused and dials no more, while a default dial of the same server (another path,
    the same backoff) is still redialing."""
    from gevent.server import StreamServer

    paths: list[str] = []
    redialed = gevent.event.Event()

    def refuse(conn: Any, addr: Any) -> None:  # reads the upgrade request, answers nothing
        request = conn.recv(4096).split(b" ", 2)
        paths.append(request[1].decode() if len(request) > 1 else "?")
        if paths.count("/default") >= 4:
            redialed.set()
        conn.close()
    away = StreamServer(("127.0.0.1", 0), refuse)
    away.start()
    base = f"ws://127.0.0.1:{away.server_port}"
    try:
        got = page.run("""
            const times = {reconnectTime: 0.02, maxReconnectTime: 0.05};
            const fast = gsp.socket("req", times);
            let failed;
            try { await fast.dial(arg.fast, {failFast: true}); failed = "resolved"; }
            catch (e) { failed = `${e.name}: ${e.message}`; }
            window.redialing = gsp.socket("req", times);
            await window.redialing.dial(arg.default);
            return {failed, pipes: fast.pipes.length};
        """, {"fast": base + "/fast", "default": base + "/default"})
        assert redialed.wait(timeout=30), paths
        page.run("window.redialing.close();")
    finally:
        away.stop()
    assert got["failed"].startswith(f"ConnectionRefused: dial {base}/fast: "), got
    assert got["pipes"] == 0
    assert paths.count("/fast") == 1, paths


def test_background_returns_before_the_first_attempt_and_block_still_works(
        page: Page, server: PageServer) -> None:
    """The default dial resolves connected when the server is there; {background: true}
    resolves before its first attempt and connects after; the old {block} option still works
    ({block: true} is failFast, {block: false} background) and warns once that it is
    deprecated, naming the new options."""
    got = page.run("""
        const warned = [], warn = console.warn;
        console.warn = (...a) => warned.push(a.join(" "));
        try {
            const plain = gsp.socket("req");
            await plain.dial(arg.url);
            const bg = gsp.socket("req");
            const up = new Promise((r) => bg.onPipe((ev) => ev.type === "connect" && r()));
            await bg.dial(arg.url, {background: true});
            const bgAtOnce = bg.pipes.length;
            await up;
            let blockTrue;
            try { await gsp.socket("req").dial(arg.dead, {block: true}); blockTrue = "resolved"; }
            catch (e) { blockTrue = e.name; }
            const old = gsp.socket("req");
            await old.dial(arg.url, {block: false});
            const blockFalse = old.pipes.length;
            await old.send("still works");
            const reply = await old.recvText({timeout: 10});
            const pipes = [plain.pipes.length, bgAtOnce, bg.pipes.length];
            plain.close(); bg.close(); old.close();
            return {pipes, blockTrue, blockFalse, reply, warned};
        } finally {
            console.warn = warn;
        }
    """, {"url": server.ws("/sp"), "dead": f"ws://127.0.0.1:{servers.free_port()}/sp"})
    assert got["pipes"] == [1, 0, 1]
    assert got["blockTrue"] == "ConnectionRefused"
    assert got["blockFalse"] == 0 and got["reply"] == "still works"
    assert len(got["warned"]) == 1, got["warned"]
    assert "block option is deprecated" in got["warned"][0]
    assert "failFast" in got["warned"][0] and "background" in got["warned"][0]


def test_the_old_option_names_still_work_and_warn_once_each(page: Page) -> None:
    """gsp.js's options are named as Python's (maxReconnectTime, maxRecvSize, sendBufferSize,
    recvBuffer); each old spelling still sets the new option, in socket(), setOption() and
    dial(), and warns once, naming the new one."""
    got = page.run("""
        const warned = [], warn = console.warn;
        console.warn = (...a) => warned.push(a.join(" "));
        try {
            const s = gsp.socket("sub", {reconnectTimeMax: 3, recvMaxSize: 5000,
                                         sendBufferMax: 6000, recvBufferMax: 7});
            s.setOption("recvMaxSize", 5001);
            const again = gsp.socket("sub", {reconnectTimeMax: 4});
            const opts = {...s.options};
            const d = await s.dial("ws://127.0.0.1:1/sp", {background: true, reconnectTimeMax: 0.3});
            opts.dialCap = d.options.maxReconnectTime;
            let bad;
            try { gsp.socket("sub", {recvBufferMax: -1}); } catch (e) { bad = e.name; }
            s.close(); again.close();
            return {opts, again: again.options.maxReconnectTime, warned, bad};
        } finally {
            console.warn = warn;
        }
    """)
    opts = got["opts"]
    assert (opts["maxReconnectTime"], opts["maxRecvSize"], opts["sendBufferSize"],
            opts["recvBuffer"]) == (3, 5001, 6000, 7), opts
    assert not {"reconnectTimeMax", "recvMaxSize", "sendBufferMax", "recvBufferMax"} & set(opts)
    assert got["again"] == 4 and opts["dialCap"] == 0.3 and got["bad"] == "BadOption"
    assert len(got["warned"]) == 4, got["warned"]  # once per old name
    for old, new in [("reconnectTimeMax", "maxReconnectTime"), ("recvMaxSize", "maxRecvSize"),
                     ("sendBufferMax", "sendBufferSize"), ("recvBufferMax", "recvBuffer")]:
        assert any(old in w and new in w for w in got["warned"]), (old, got["warned"])


# -- the codec, unit by unit (in the page: no Node) ---------------------------------------------

def test_the_codec_matches_gsps_own(page: Page) -> None:
    """gsp.codec against gsp's Python codec: frames (header words then body), request and
    survey ids (high bit set, counting on, wrapping within 31 bits), the backtrace split of
    REP and RESPONDENT on 300 random messages, subprotocol names and URLs."""
    import random

    from gsp.protocol.backtrace import split_backtrace

    rnd = random.Random(45)
    messages = []
    for _ in range(300):
        words = [rnd.getrandbits(31) | (rnd.random() < 0.3) << 31 for _ in range(rnd.randrange(12))]
        tail = bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(6)))
        messages.append(b"".join(w.to_bytes(4, "big") for w in words) + tail)
    got = page.run("""
        const c = gsp.codec;
        const frames = [hex(c.encode([0x80000001], c.toBytes("ab"))),
                        hex(c.encode([1, 0xffffffff], new Uint8Array(0))),
                        hex(c.encode(unhex("0000000780000002"), c.toBytes("body")))];
        const seq = new c.IdSequence(0x7ffffffe);
        const ids = [seq.take(), seq.take(), seq.take()];
        const fresh = new c.IdSequence();
        const random = Array.from({length: 50}, () => fresh.take() >>> 31);
        const splits = arg.map((h) => {
            const r = c.splitBacktrace(unhex(h), 8);
            return r === null ? null : [hex(r.header), hex(r.body)];
        });
        const names = Object.keys(gsp.PROTOCOLS).map((n) => [n, c.subprotocolFor(n)]);
        const urls = ["/sp", "http://x.test:8/a?b=1#c", "https://x.test/sp", "wss://y/z"].map(c.wsURL);
        let bad = "none";
        try { c.wsURL("ftp://x/"); } catch (e) { bad = e.name; }
        return {frames, ids, random, splits, names, urls, bad,
                text: hex(c.toBytes("é")), view: hex(c.toBytes(new Uint16Array([0x0102])))};
    """, [m.hex() for m in messages])
    assert got["frames"] == ["8000000161" "62", "00000001ffffffff", "0000000780000002" + b"body".hex()]
    assert got["ids"] == [0xFFFFFFFE, 0xFFFFFFFF, 0x80000000]
    assert got["random"] == [1] * 50
    for msg, split in zip(messages, got["splits"]):
        want = split_backtrace(msg, 8)
        assert split == (None if want is None else [want[0].hex(), want[1].hex()]), msg.hex()
    assert sum(s is not None for s in got["splits"]) > 50  # both outcomes are exercised
    peers = {"pair": "pair", "pair1": "pair1", "pub": "sub", "sub": "pub", "req": "rep",
             "rep": "req", "push": "pull", "pull": "push", "surveyor": "respondent",
             "respondent": "surveyor", "bus": "bus"}
    assert dict(got["names"]) == {k: f"{v}.sp.nanomsg.org" for k, v in peers.items()}
    host = page.run("return location.host;")
    assert got["urls"] == [f"ws://{host}/sp", "ws://x.test:8/a?b=1", "wss://x.test/sp", "wss://y/z"]
    assert got["bad"] == "InvalidAddress"
    assert got["text"] == "c3a9" and got["view"] == "0201"


# -- other gsp endpoints, wss, redial pacing ----------------------------------------------------

def test_page_against_gsp_ws_listeners(page: Page, server: PageServer) -> None:
    """Not only the mount: a gsp socket's own ws:// listener (its own HTTP server, another
    origin than the page's: named in ``ws_origins``)."""
    rep = gsp.socket("rep", max_recv_size=0)
    pub = gsp.socket("pub")
    pages = {server.url.rstrip("/")}
    try:
        rep_url = rep.listen("ws://127.0.0.1:0/rep", ws_origins=pages).url
        pub_url = pub.listen("ws://127.0.0.1:0/pub", ws_origins=pages).url
        g = gevent.spawn(lambda: [rep.send(rep.recv()) for _ in PAYLOADS])
        ticker = gsp_sends(pub, [b"news " + p for p in PAYLOADS])
        got = page.run("""
            const sub = gsp.socket("sub", {recvTimeout: 10});
            sub.subscribe("news ");
            await sub.dial(arg.pub);
            const req = gsp.socket("req", {recvTimeout: 10});
            await req.dial(arg.rep);
            const out = {req: [], sub: []};
            for (const h of arg.bodies) { await req.send(unhex(h)); out.req.push(hex(await req.recv())); }
            for (const _ of arg.bodies) out.sub.push(hex((await sub.recv()).subarray(5)));
            req.close(); sub.close();
            return out;
        """, {"rep": rep_url, "pub": pub_url, "bodies": HEX})
        g.get(timeout=10)
        ticker.get(timeout=10)
        assert got == {"req": HEX, "sub": HEX}
    finally:
        rep.close()
        pub.close()


def test_a_page_served_over_https_dials_wss(browser: Browser, pki: Any) -> None:
    """pywsgi serving HTTPS: the page's dial("/sp") becomes wss:// (the page's scheme) and the
    mount carries it over TLS."""
    with page_server(ssl_context=pki.server_context(cooperative=True)) as srv:
        page = browser.page(srv.url, ignore_https_errors=True)  # trustme's CA is not Chromium's
        try:
            got = page.run("""
                const req = gsp.socket("req", {recvTimeout: 10});
                const d = await req.dial("/sp");
                await req.send("over tls");
                const reply = await req.recvText();
                req.close();
                return {url: d.url, reply};
            """)
        finally:
            page.close()
    assert got == {"url": srv.ws("/sp"), "reply": "over tls"}
    assert got["url"].startswith("wss://")


def test_redials_back_off_while_the_server_is_away(page: Page) -> None:
    """A dialer whose server is gone redials after reconnectTime, doubling up to
    maxReconnectTime: over 1.5 s with 0.02 s doubling to 0.3 s that is at most about a dozen
    attempts (without backoff it would be up to 75)."""
    from gevent.server import StreamServer

    attempts: list[float] = []

    def refuse(conn: Any, addr: Any) -> None:  # takes the TCP connection, answers nothing
        attempts.append(gevent.get_hub().loop.now())
        conn.close()
    away = StreamServer(("127.0.0.1", 0), refuse)
    away.start()
    try:
        got = page.run("""
            const req = gsp.socket("req");
            await req.dial(arg, {background: true, reconnectTime: 0.02, maxReconnectTime: 0.3});
            await new Promise((r) => setTimeout(r, 1500));
            req.close();
            return req.pipes.length;
        """, f"ws://127.0.0.1:{away.server_port}/sp")
    finally:
        away.stop()
    assert got == 0
    assert 3 <= len(attempts) <= 15, attempts


def test_the_declarations_match_the_module(page: Page) -> None:
    """gsp.d.ts declares exactly what gsp.js exports, and every method it declares on Socket,
    Context and Dialer exists (tsc checks pages against the declarations; this checks the
    declarations against the module)."""
    import re

    dts = client_source("gsp.d.ts").decode()
    declared = set(re.findall(r"^export (?:declare )?(?:class|function|const) (\w+)", dts, re.M))
    members = {}
    for cls in ("Socket", "Context", "Dialer"):
        head = re.search(rf"^export (?:declare class|interface) {cls}\b", dts, re.M)
        assert head is not None, cls
        body = dts[head.end():].split("\n}\n", 1)[0]
        members[cls] = sorted(set(re.findall(r"^  (?:readonly )?(\w+)[(<?:]", body, re.M))
                              - {"constructor"})
    got = page.run("""
        const sock = gsp.socket("req");
        const d = await sock.dial(arg.url);
        const samples = {Socket: sock, Context: sock.openContext(), Dialer: d};
        const missing = {};
        for (const [cls, names] of Object.entries(arg.members)) {
            missing[cls] = names.filter((n) => !(n in samples[cls]));
        }
        sock.close();
        return {exports: Object.keys(gsp).sort(), missing};
    """, {"url": page_url_ws(page), "members": members})
    assert set(got["exports"]) == declared
    assert got["missing"] == {"Socket": [], "Context": [], "Dialer": []}, got["missing"]
    assert len(members["Socket"]) > 15 and len(members["Context"]) > 8


def page_url_ws(page: Page) -> str:
    return str(page.run("return location.href;")).replace("http://", "ws://") + "sp"


def test_send_waits_for_room_and_times_out_when_the_peer_stops_reading(
        page: Page, server: PageServer, mounted: Callable[..., gsp.Socket]) -> None:
    """A PULL that does not read: once the browser holds sendBufferSize unsent bytes, a page's
    send waits for room and, after sendTimeout, fails with Timeout saying why; nothing sent
    before is lost (the PULL then reads every message in order)."""
    pull = mounted("pull", "/sink")
    got = page.run("""
        const push = gsp.socket("push", {sendTimeout: 1, sendBufferSize: 1 << 16});
        await push.dial(arg);
        const body = new Uint8Array(1 << 16);
        let sent = 0, error = null;
        while (sent < 2000) {
            new DataView(body.buffer).setUint32(0, sent);
            try { await push.send(body); sent++; } catch (e) { error = `${e.name}: ${e.message}`; break; }
        }
        window.push = push;
        return {sent, error};
    """, server.ws("/sink"))
    assert got["error"] is not None and got["error"].startswith("Timeout: push send timed out"), got
    assert "send buffers are full" in got["error"]
    bodies = [pull.recv(timeout=10) for _ in range(got["sent"])]
    assert [int.from_bytes(b[:4], "big") for b in bodies] == list(range(got["sent"]))
    page.run("window.push.close();")
