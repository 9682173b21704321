"""docs/errors.md and the code agree: every row of its per-protocol table is checked here."""

from __future__ import annotations

import pathlib
import re
from typing import Callable

import pytest

import gsp

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "errors.md"
WAIT = 0.05


def table() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.fullmatch(r"[a-z0-9]+", cells[0]) and cells[0] != "protocol":
            rows[cells[0]] = (cells[1], cells[2])
    return rows


def outcome(call) -> str:  # type: ignore[no-untyped-def]
    try:
        call()
    except gsp.GspError as exc:
        return type(exc).__name__
    return "ok"


def test_the_table_covers_every_built_in_protocol() -> None:
    # Built in: registered by gsp's own distribution. (Not "a factory from gsp.*": the gather
    # example's is gsp.protocol.replies.responder.)
    from scripts.docgen import origins

    builtin = {p for p, dist in origins("gsp_protocols").items() if dist == "gevent-sp"}
    assert "pair1" in builtin and "gather" not in builtin and "star" not in builtin
    assert set(table()) == builtin


@pytest.mark.parametrize("proto", sorted(table()))
def test_send_and_recv_with_no_peer_raise_what_the_doc_says(
        gsp_socket: Callable[..., gsp.Socket], proto: str) -> None:
    send, recv = table()[proto]
    s = gsp_socket(proto, send_timeout=WAIT, recv_timeout=WAIT)
    assert outcome(lambda: s.send(b"x")) == send
    assert outcome(lambda: s.recv()) == recv


@pytest.mark.parametrize("proto", sorted(table()))
def test_every_call_on_a_closed_socket_raises_closed(proto: str) -> None:
    s = gsp.socket(proto)
    s.close()
    assert outcome(lambda: s.send(b"x")) == "Closed"
    assert outcome(lambda: s.recv()) == "Closed"


def test_req_recv_raises_connection_broken_when_its_pipe_dies_without_resend(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    # The one pipe error that reaches a user call, as the doc says.
    rep = gsp_socket("rep", listen="inproc://errors-doc-req")
    req = gsp_socket("req", dial="inproc://errors-doc-req", resend_time=0,
                     recv_timeout=2)
    req.send(b"q")
    assert rep.recv() == b"q"
    req.pipes[0].close()
    with pytest.raises(gsp.ConnectionBroken):
        req.recv()
