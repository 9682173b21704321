"""How fast a page's gsp.js sockets go through the WSGI mount, in headless Chromium.

    python tests/tools/browser_bench.py [--runs 5] [--count 2000]

One gevent.pywsgi server in this process (a REP echo and a PUSH mounted, as in
plugins/gsp-ws/tests/test_browser.py) and one headless Chromium (Debian's /usr/bin/chromium, by Playwright).
Each run measures, in the page (performance.now()):

- ``req 1 ctx``: ``count`` sequential request/reply round trips of 16 bytes on one context;
- ``req 10 ctx``: ``count`` round trips spread over 10 contexts at once;
- ``pull 100 B``: ``10 x count`` messages of 100 bytes pushed by the server, received by a PULL;
- ``raw req``, ``raw pull``: the same over the browser's own WebSocket with the SP framing done by
  hand (no gsp.js), side by side: what gsp.js costs on top.

Prints the median and the range of the runs of each, per second. The server and the browser
share the machine, so a figure is the pair's, on this machine: compare runs made side by side.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import gevent  # noqa: E402

import gsp  # noqa: E402
from tests.support.browser_support import Browser, page_server, wait_pipes  # noqa: E402

ROUND_TRIPS = """
    const req = gsp.socket("req", {recvTimeout: 30});
    await req.dial(arg.url);
    const body = new Uint8Array(16);
    const ctxs = Array.from({length: arg.contexts}, () => req.openContext());
    const per = Math.floor(arg.count / arg.contexts);
    const t0 = performance.now();
    await Promise.all(ctxs.map(async (ctx) => {
        for (let i = 0; i < per; i++) { await ctx.send(body); await ctx.recv(); }
    }));
    const seconds = (performance.now() - t0) / 1000;
    req.close();
    return per * arg.contexts / seconds;
"""

# The baselines: the browser's own WebSocket with the SP framing done by hand, no gsp.js.
RAW_ROUND_TRIPS = """
    const ws = new WebSocket(arg.url, ["rep.sp.nanomsg.org"]);
    ws.binaryType = "arraybuffer";
    await new Promise((ok, no) => { ws.onopen = ok; ws.onerror = no; });
    let wake = null;
    ws.onmessage = () => wake();
    const msg = new Uint8Array(20);
    const view = new DataView(msg.buffer);
    const t0 = performance.now();
    for (let i = 0; i < arg.count; i++) {
        view.setUint32(0, (0x80000000 | i) >>> 0);
        const got = new Promise((r) => { wake = r; });
        ws.send(msg);
        await got;
    }
    const seconds = (performance.now() - t0) / 1000;
    ws.close();
    return arg.count / seconds;
"""

RAW_PULL = """
    const ws = new WebSocket(arg.url, ["push.sp.nanomsg.org"]);
    ws.binaryType = "arraybuffer";
    let n = 0, t0 = 0, done;
    const finished = new Promise((r) => { done = r; });
    ws.onmessage = () => {
        if (n++ === 0) t0 = performance.now();
        if (n === arg.count) done((arg.count - 1) / ((performance.now() - t0) / 1000));
    };
    const rate = await finished;
    ws.close();
    return rate;
"""

PULL = """
    const pull = gsp.socket("pull", {recvTimeout: 30});
    await pull.dial(arg.url);
    await pull.recv();  // the first message starts the clock
    const t0 = performance.now();
    for (let i = 1; i < arg.count; i++) await pull.recv();
    const seconds = (performance.now() - t0) / 1000;
    pull.close();
    return (arg.count - 1) / seconds;
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--count", type=int, default=2000)
    args = parser.parse_args(argv)
    results: dict[str, list[float]] = {"req 1 ctx": [], "raw req": [], "req 10 ctx": [],
                                       "pull 100 B": [], "raw pull": []}
    browser = Browser()
    try:
        with page_server() as srv:
            push = gsp.socket("push", send_timeout=30)
            srv.mount(push, "/push")
            page = browser.page(srv.url)
            try:
                for _ in range(args.runs):
                    for name, contexts in (("req 1 ctx", 1), ("req 10 ctx", 10)):
                        results[name].append(page.run(ROUND_TRIPS, {
                            "url": srv.ws("/sp"), "count": args.count, "contexts": contexts}))
                    results["raw req"].append(page.run(RAW_ROUND_TRIPS, {
                        "url": srv.ws("/sp"), "count": args.count}))
                    n = 10 * args.count

                    def feed(n: int = n) -> None:
                        wait_pipes(push)
                        for _ in range(n):
                            push.send(b"x" * 100)
                    for name, script in (("pull 100 B", PULL), ("raw pull", RAW_PULL)):
                        g = gevent.spawn(feed)
                        results[name].append(page.run(script, {"url": srv.ws("/push"),
                                                               "count": n}))
                        g.get(timeout=60)
                        while push.pipes:  # the page's connection has gone
                            gevent.sleep(0.01)
            finally:
                page.close()
                push.close()
    finally:
        browser.close()
    print(f"gsp.js through the mount, {args.runs} runs (per second: median [min .. max])")
    for name, values in results.items():
        print(f"  {name:<11} {statistics.median(values):>9,.0f}  "
              f"[{min(values):,.0f} .. {max(values):,.0f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
