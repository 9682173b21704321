"""Wire interop with nng (pynng) for req/rep and surveyor/respondent: tcp and ipc, each side
listening in turn. Every blocking pynng call runs on the native threadpool (tests/support/nng.py)."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

import gsp
from gsp.testing import wait_for
from tests.support import nng, u32

pytestmark = pytest.mark.interop

SCHEMES = ["tcp", "ipc"]
WHO_LISTENS = ["gsp_listens", "nng_listens"]


@pytest.fixture
def nsocks() -> Iterator[Any]:
    """Make pynng sockets that are closed at teardown."""
    made: list[Any] = []

    def make(kind: str, **kw: Any) -> Any:
        s = nng.socket(kind, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def link(g: gsp.Socket, n: Any, scheme: str, who: str, ipc_dir: str) -> None:
    """Connect a gsp socket and a pynng socket; return once both sides have the pipe."""
    url = f"ipc://{ipc_dir}/{who}.sock" if scheme == "ipc" else "tcp://127.0.0.1:0"
    if who == "gsp_listens":
        bound = g.listen(url).url
        nng.run(n.dial, bound, block=True)
    else:
        lst = n.listen(url)
        g.dial(nng.bound_url(lst, scheme), fail_fast=True)
    wait_for(lambda: len(g.pipes) == 1 and len(n.pipes) == 1)


# (asker, responder, gsp asker options, nng asker options): req/rep and surveyor/respondent
# exchange the same way, each reply answering one request or survey.
FAMILIES = [("req", "rep", {"recv_timeout": 5, "send_timeout": 5}, {}),
            ("surveyor", "respondent", {"survey_time": 2}, {"survey_time": 2000})]


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("who", WHO_LISTENS)
@pytest.mark.parametrize("asker,responder,opts,_", FAMILIES, ids=["req", "surveyor"])
def test_gsp_asks_nng_answers(gsp_socket, nsocks, ipc_dir, scheme, who, asker, responder, opts, _):
    a, r = gsp_socket(asker, **opts), nsocks(responder)
    link(a, r, scheme, who, ipc_dir)
    for i in range(3):
        a.send(b"question %d" % i)
        assert nng.run(r.recv) == b"question %d" % i
        nng.run(r.send, b"answer %d" % i)
        assert a.recv() == b"answer %d" % i


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("who", WHO_LISTENS)
@pytest.mark.parametrize("asker,responder,_,nng_opts", FAMILIES, ids=["req", "surveyor"])
def test_nng_asks_gsp_answers(gsp_socket, nsocks, ipc_dir, scheme, who, asker, responder, _,
                              nng_opts):
    a, r = nsocks(asker, **nng_opts), gsp_socket(responder, recv_timeout=5, send_timeout=5)
    link(r, a, scheme, who, ipc_dir)
    for i in range(3):
        pending = nng.spawn(lambda i=i: (a.send(b"question %d" % i), a.recv())[1])
        assert r.recv() == b"question %d" % i
        r.send(b"answer %d" % i)
        assert pending.get(timeout=5) == b"answer %d" % i


def test_nng_req_through_gsp_device_to_nng_rep(gsp_socket, nsocks, spawn):
    """nng REQ → gsp raw rep | raw req device → nng REP: gsp's headers pass nng's checks."""
    front, back = gsp_socket("rep", raw=True), gsp_socket("req", raw=True)
    dev = gsp.device(front, back)
    try:
        req, rep = nsocks("req"), nsocks("rep")
        nng.run(req.dial, front.listen("tcp://127.0.0.1:0").url, block=True)
        nng.run(rep.dial, back.listen("tcp://127.0.0.1:0").url, block=True)
        wait_for(lambda: front.pipes and back.pipes)
        pending = nng.spawn(lambda: (req.send(b"via device"), req.recv())[1])
        assert nng.run(rep.recv) == b"via device"
        nng.run(rep.send, b"and back")
        assert pending.get(timeout=5) == b"and back"
    finally:
        dev.stop()


def test_nng_req_resend_reaches_gsp_raw_rep(gsp_socket, nsocks):
    """nng's resend carries the same request id; a gsp raw rep answering the second copy
    satisfies the nng REQ."""
    xrep = gsp_socket("rep", raw=True, recv_timeout=5)
    req = nsocks("req", resend_time=100)
    nng.run(req.dial, xrep.listen("tcp://127.0.0.1:0").url, block=True)
    wait_for(lambda: xrep.pipes)
    pending = nng.spawn(lambda: (req.send(b"again?"), req.recv())[1])
    first, second = xrep.recv_msg(), xrep.recv_msg()
    assert first.header == second.header and second.body == b"again?"
    assert len(first.header) == 8 and first.header[4] & 0x80
    xrep.send_msg(gsp.Message(b"yes", second.header))
    assert pending.get(timeout=5) == b"yes"


def test_nng_req_contexts_gsp_rep_contexts(gsp_socket, nsocks, spawn):
    """Concurrent nng REQ contexts against gsp REP contexts: every reply finds its request."""
    rep = gsp_socket("rep")
    req = nsocks("req")
    nng.run(req.dial, rep.listen("tcp://127.0.0.1:0").url, block=True)
    wait_for(lambda: rep.pipes)

    def serve(ctx: gsp.Context) -> None:
        try:
            while True:
                ctx.send(b"re:" + ctx.recv())
        except gsp.Closed:
            pass

    workers = [spawn(serve, rep.open_context()) for _ in range(4)]

    def ask(i: int) -> bytes:
        ctx = req.new_context()
        try:
            ctx.send(u32(i))
            return ctx.recv()
        finally:
            ctx.close()

    pending = [nng.spawn(ask, i) for i in range(8)]
    assert sorted(p.get(timeout=5) for p in pending) == sorted(b"re:" + u32(i) for i in range(8))
    rep.close()
    for w in workers:
        w.get(timeout=2)
