"""gsp.js in headless Chromium against peers that are not the in-process mount: nng's own
``ws://`` listeners (pynng: the nng mapping, not only gsp's) and the mount under gunicorn
``-k gevent`` (tests/apps/browser_app.py), which serves both the page and the module."""

from __future__ import annotations

import time
from typing import Any, Iterator

import gevent
import pynng
import pytest

import tests.support as _support
from tests.support import nng, servers
from tests.support.browser_support import Browser, Page, page_server

pytestmark = pytest.mark.browser

ROOT = str(_support.ROOT)
#: Bodies for nng peers: every byte value and 100,000 bytes (> 64 KiB). 0-byte messages run
#: against gsp in test_browser.py: pynng's recv() cannot return an empty message.
PAYLOADS = [bytes(range(256)), bytes((i * 7 + 3) & 0xFF for i in range(100_000)), b"x"]
HEX = [p.hex() for p in PAYLOADS]


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with page_server() as srv:
        p = browser.page(srv.url)
        try:
            yield p
        finally:
            p.close()


def nng_listener(kind: str, **kw: Any) -> tuple[pynng.Socket, str]:
    """A pynng socket listening on ws://127.0.0.1:<free port>/<kind>."""
    port = servers.free_port()
    sock = nng.socket(kind, recv_max_size=0, **kw)
    url = f"ws://127.0.0.1:{port}/{kind}"
    sock.listen(url)
    return sock, url


def close_nng(*socks: pynng.Socket, timeout: float = 5.0) -> None:
    """Close pynng sockets once the page's connections have left them (nng 1.x can abort the
    process when a socket closes while a pipe is still being torn down: tests/support/nng.py)."""
    deadline = time.monotonic() + timeout
    while any(s.pipes for s in socks) and time.monotonic() < deadline:
        gevent.sleep(0.01)
    gevent.sleep(0.05)
    for s in socks:
        s.close()


@pytest.mark.interop
def test_page_against_nng_ws_listeners(page: Page) -> None:
    """req/rep, sub, push/pull, pair1 and surveyor against pynng, one page for all of them."""
    rep, rep_url = nng_listener("rep")
    pub, pub_url = nng_listener("pub")
    pub_added = nng.added_pipes(pub)
    pull, pull_url = nng_listener("pull")
    pair1, pair1_url = nng_listener("pair1")
    resp, resp_url = nng_listener("respondent")
    try:
        def echo_rep() -> None:
            for _ in range(len(PAYLOADS) + 1):
                rep.send(rep.recv())

        def publish() -> None:
            while not pub_added:  # (nng: a pipe carries messages once fully added)
                time.sleep(0.01)
            pub.send(b"noise")  # filtered out in the page (it subscribes before it dials)
            for p in PAYLOADS:
                pub.send(b"t" + p)

        def pair1_echo() -> None:
            for _ in PAYLOADS:
                pair1.send(pair1.recv())

        def answer() -> None:
            for _ in PAYLOADS:
                resp.send(resp.recv())
        jobs = [nng.spawn(f) for f in (echo_rep, publish, pair1_echo, answer)]
        got_pull = nng.spawn(nng.recv_many, pull, len(PAYLOADS))
        got = page.run("""
            const out = {req: [], sub: [], pair1: [], surveyor: []};
            const req = gsp.socket("req", {recvTimeout: 10, sendTimeout: 10});
            await req.dial(arg.rep);
            for (const h of arg.bodies) { await req.send(unhex(h)); out.req.push(hex(await req.recv())); }
            const ctx = req.openContext();
            await ctx.send("by a context"); out.reqctx = await ctx.recvText();
            const sub = gsp.socket("sub", {recvTimeout: 10});
            sub.subscribe("t");
            await sub.dial(arg.pub);
            for (const _ of arg.bodies) out.sub.push(hex(await sub.recv()));
            const push = gsp.socket("push", {sendTimeout: 10});
            await push.dial(arg.pull);
            for (const h of arg.bodies) await push.send(unhex(h));
            const pair1 = gsp.socket("pair1", {recvTimeout: 10, sendTimeout: 10});
            await pair1.dial(arg.pair1);
            for (const h of arg.bodies) { await pair1.send(unhex(h)); out.pair1.push(hex(await pair1.recv())); }
            const surveyor = gsp.socket("surveyor", {surveyTime: 10});
            await surveyor.dial(arg.resp);
            for (const h of arg.bodies) { await surveyor.send(unhex(h)); out.surveyor.push(hex(await surveyor.recv())); }
            await new Promise((r) => setTimeout(r, 200));
            for (const s of [req, sub, push, pair1, surveyor]) s.close();
            return out;
        """, {"rep": rep_url, "pub": pub_url, "pull": pull_url, "pair1": pair1_url,
              "resp": resp_url, "bodies": HEX})
        for j in jobs:
            j.get(timeout=10)
        assert got_pull.get(timeout=10) == PAYLOADS
        assert got == {"req": HEX, "reqctx": "by a context", "sub": ["74" + h for h in HEX],
                       "pair1": HEX, "surveyor": HEX}
    finally:
        close_nng(rep, pub, pull, pair1, resp)


@pytest.mark.interop
def test_page_pulls_from_nng_and_pairs_and_buses_with_it(page: Page) -> None:
    """The other directions and the rest: an nng PUSH listener feeding a page's PULL, pair0 and
    bus echoes."""
    push, push_url = nng_listener("push")
    pair, pair_url = nng_listener("pair")
    bus, bus_url = nng_listener("bus")
    try:
        feeder = nng.spawn(nng.send_many, push, PAYLOADS)

        def echo(sock: pynng.Socket) -> None:
            for _ in PAYLOADS:
                sock.send(sock.recv())
        echoes = [nng.spawn(echo, s) for s in (pair, bus)]
        got = page.run("""
            const out = {pull: [], pair: [], bus: []};
            const pull = gsp.socket("pull", {recvTimeout: 10});
            await pull.dial(arg.push);
            for (const _ of arg.bodies) out.pull.push(hex(await pull.recv()));
            for (const name of ["pair", "bus"]) {
                const s = gsp.socket(name, {recvTimeout: 10, sendTimeout: 10});
                await s.dial(arg[name]);
                for (const h of arg.bodies) { await s.send(unhex(h)); out[name].push(hex(await s.recv())); }
                s.close();
            }
            pull.close();
            return out;
        """, {"push": push_url, "pair": pair_url, "bus": bus_url, "bodies": HEX})
        feeder.get(timeout=10)
        for e in echoes:
            e.get(timeout=10)
        assert got == {"pull": HEX, "pair": HEX, "bus": HEX}
    finally:
        close_nng(push, pair, bus)


@pytest.mark.interop
def test_nng_requests_reach_a_page_rep_through_a_device(browser: Browser) -> None:
    """The other direction: an nng REQ's requests reach a page's REP. A page cannot listen, so
    a raw gsp REP/REQ device relays (nng -> gsp ws listener -> device -> mount -> page), and
    the page's REP meets a two-word backtrace (the device's pipe id, then nng's request id)."""
    import gsp

    front = gsp.socket("rep", raw=True)
    back = gsp.socket("req", raw=True)
    req = nng.socket("req")
    try:
        with page_server() as srv:
            port = servers.free_port()
            front.listen(f"ws://127.0.0.1:{port}/relay")
            srv.mount(back, "/back")
            dev = gsp.device(front, back)
            page = browser.page(srv.url)
            try:
                page.run("""
                    const rep = gsp.socket("rep");
                    await rep.dial(arg);
                    window.rep = rep;
                    (async () => { for (;;) await rep.send(await rep.recv()); })().catch(() => {});
                """, srv.ws("/back"))
                nng.run(req.dial, f"ws://127.0.0.1:{port}/relay", block=True)
                answers = []
                for p in PAYLOADS:
                    nng.run(req.send, p)
                    answers.append(nng.run(req.recv))
                assert answers == PAYLOADS
                page.run("window.rep.close();")
            finally:
                page.close()
            front.close()
            close_nng(req)
            dev.join(5)
    finally:
        front.close()
        back.close()
        req.close()


def test_gunicorn_serves_the_module_and_the_mount(browser: Browser) -> None:
    with servers.gunicorn("tests.apps.browser_app:application", pythonpath=ROOT,
                          workers=1) as srv:
        page = browser.page(srv.url + "/")
        try:
            got = page.run("""
                const r = await fetch("/sp/gsp.js");
                const type = r.headers.get("content-type");
                const off = (await fetch("/ticks/gsp.js")).status;
                const req = gsp.socket("req", {recvTimeout: 10, sendTimeout: 10});
                await req.dial("/sp");
                const echoed = [];
                for (const h of arg) { await req.send(unhex(h)); echoed.push(hex(await req.recv())); }
                const sub = gsp.socket("sub", {recvTimeout: 10});
                sub.subscribe("tick ");
                await sub.dial("/ticks");
                const ticks = [await sub.recvText(), await sub.recvText()];
                const push = gsp.socket("push", {sendTimeout: 10});
                await push.dial("/pull");
                for (const h of arg) await push.send(unhex(h));
                const want = arg.map((h) => h || "-").join(" ");
                let pulled = "";
                for (let i = 0; i < 200 && pulled !== want; i++) {  // up to 10 s
                    if (i) await new Promise((r) => setTimeout(r, 50));
                    pulled = (await (await fetch("/pulled")).text()).trim();
                }
                for (const s of [req, sub, push]) s.close();
                return {type, off, echoed, ticks, pulled};
            """, HEX)
        finally:
            page.close()
    assert got["type"] == "text/javascript; charset=utf-8"
    assert got["off"] == 404  # serve_js=False on that mount
    assert got["echoed"] == HEX
    first, second = (int(t.split()[1]) for t in got["ticks"])
    assert second > first
    assert got["pulled"] == " ".join(h or "-" for h in HEX)
