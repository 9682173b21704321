"""``gsp cat`` as a subprocess against pynng (nng) peers and against itself, over tcp and ipc.

Readiness is waited for, never slept for: a pynng peer that listens is bound before gsp cat
starts; a pynng dialer retries in the background (``block=False``) and its send waits for the
connection; a gsp cat listener says ``Listening at: URL`` on stderr with ``-v``; a gsp cat
dialer started before its peer listens retries with ``--async``.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterator

import pytest

from gsp.testing import free_url
from tests.support import nng
from tests.support.catkit import Cats, cats_fixture, finish, listening
from tests.support.certs import PKI

SCHEMES = ["tcp", "ipc"]


@pytest.fixture
def cats() -> Iterator[Cats]:
    yield from cats_fixture()


@pytest.fixture(params=SCHEMES)
def url(request: pytest.FixtureRequest, gsp_free_url: Callable[[str], str]) -> str:
    """A free tcp:// (127.0.0.1) or ipc:// URL, fixed before anything listens on it."""
    return gsp_free_url(request.param)


@pytest.mark.interop
def test_cat_pushes_to_pynng_pull(cats: Cats, url: str) -> None:
    with nng.socket("pull") as pull:
        pull.listen(url)
        p = cats.start("--push", "--dial", url, "--data", "hello nng", "--count", "3")
        got = [pull.recv() for _ in range(3)]
        assert finish(p) == (0, b"", "")
    assert got == [b"hello nng"] * 3


@pytest.mark.interop
def test_pynng_pushes_to_cat_pull(cats: Cats, url: str) -> None:
    p = cats.start("--pull", "--listen", url, "--count", "2", "--quoted")
    with nng.socket("push") as push:
        push.dial(url, block=False)  # nng redials until gsp cat listens
        push.send(b"one")
        push.send(b"two\n")
        assert finish(p) == (0, b'"one"\n"two\\n"\n', "")


@pytest.mark.interop
def test_cat_req_asks_pynng_rep(cats: Cats, url: str) -> None:
    with nng.socket("rep") as rep:
        rep.listen(url)
        p = cats.start("--req", "--dial", url, "--data", "ping", "--raw")
        assert rep.recv() == b"ping"
        rep.send(b"pong")
        assert finish(p) == (0, b"pong", "")


@pytest.mark.interop
def test_pynng_req_asks_cat_rep(cats: Cats, url: str) -> None:
    p = cats.start("--rep", "--listen", url, "--data", "pong", "--count", "2", "--ascii")
    with nng.socket("req") as req:
        req.dial(url, block=False)
        for question in (b"ping 1", b"ping\x002"):
            req.send(question)
            assert req.recv() == b"pong"
    assert finish(p) == (0, b"ping 1\nping.2\n", "")


def cat_subscribed(cats: Cats, pub: Any, url: str, *args: str) -> Any:
    """A ``gsp cat`` sub (``args``) dialing the pynng ``pub`` listening on ``url``, connected."""
    connected = threading.Event()
    pub.add_post_pipe_connect_cb(lambda pipe: connected.set())
    pub.listen(url)
    p = cats.start(*args, "--dial", url)
    assert connected.wait(20), "gsp cat's sub never connected"
    return p


@pytest.mark.interop
def test_cat_sub_filters_what_pynng_pub_publishes(cats: Cats, url: str) -> None:
    with nng.socket("pub") as pub:
        p = cat_subscribed(cats, pub, url, "--sub", "--subscribe", "a", "--subscribe", "b",
                           "--count", "3", "--quoted")
        for msg in (b"a1", b"zz", b"b2", b"c3", b"ab"):
            pub.send(msg)
        assert finish(p) == (0, b'"a1"\n"b2"\n"ab"\n', "")


@pytest.mark.interop
def test_cat_sub_subscribes_to_all_by_default(cats: Cats, url: str) -> None:
    with nng.socket("pub") as pub:
        p = cat_subscribed(cats, pub, url, "--sub0", "--count", "2", "--hex")
        pub.send(b"\x00")
        pub.send(b"zz")
        assert finish(p) == (0, b'"\\x00"\n"\\x7a\\x7a"\n', "")


@pytest.mark.interop
def test_cat_pub_publishes_to_pynng_sub(cats: Cats, url: str) -> None:
    # --interval publishes again and again, so the subscriber gets one whenever it connects.
    p = cats.start("--pub", "--listen", url, "--data", "news", "--interval", "0.05",
                   "--count", "600")
    with nng.socket("sub") as sub:
        sub.subscribe(b"")
        sub.dial(url, block=False)
        assert sub.recv() == b"news"
    p.kill()
    finish(p)


@pytest.mark.interop("nngcat", "pynng")
def test_cat_pair_is_nng_pair1(cats: Cats, url: str) -> None:
    # As in nngcat, --pair means pair v1: it talks to nng's Pair1 (a pair v0 peer would not).
    with nng.socket("pair1") as pair:
        pair.listen(url)
        p = cats.start("--pair", "--dial", url, "--data", "hi", "--count", "1", "--raw",
                       "--recv-timeout", "1")
        assert pair.recv() == b"hi"
        pair.send(b"back")
        assert finish(p) == (0, b"back", "")


@pytest.mark.interop
def test_cat_surveys_pynng_respondents(cats: Cats, url: str,
                                      gsp_free_url: Callable[[str], str]) -> None:
    url2 = gsp_free_url(url.split("://")[0])
    with nng.socket("respondent") as r1, nng.socket("respondent") as r2:
        r1.listen(url)
        r2.listen(url2)
        p = cats.start("--surveyor", "--dial", url, "--dial", url2, "--data", "who?",
                       "--quoted", "-o", "survey_time=2")
        for r, name in ((r1, b"r1"), (r2, b"r2")):
            assert r.recv() == b"who?"
            r.send(name)
        code, out, err = finish(p)
    assert (code, err) == (0, "")
    assert sorted(out.splitlines()) == [b'"r1"', b'"r2"']


# -- gsp cat against gsp cat ---------------------------------------------------------------------

def test_cat_push_to_cat_pull(cats: Cats, url: str) -> None:
    pull = cats.start("--pull", "--listen", url, "--count", "3", "--hex")
    push = cats.start("--push", "--dial", url, "--async", "--data", "\x01z", "--count", "3")
    assert finish(push) == (0, b"", "")
    assert finish(pull) == (0, b'"\\x01\\x7a"\n' * 3, "")


def test_cat_req_to_cat_rep(cats: Cats, url: str) -> None:
    rep = cats.start("--rep", "--listen", url, "--data", "pong", "--count", "2", "--quoted")
    req = cats.start("--req", "--dial", url, "--async", "--data", "ping", "--count", "2",
                     "--quoted")
    assert finish(req) == (0, b'"pong"\n' * 2, "")
    assert finish(rep) == (0, b'"ping"\n' * 2, "")


def test_cat_req_fails_when_no_reply_comes_within_recv_timeout(cats: Cats, url: str) -> None:
    rep = cats.start("--rep", "--listen", url, "--count", "1", "--raw")  # no --data: no reply
    req = cats.start("--req", "--dial", url, "--async", "--data", "anyone?",
                     "--recv-timeout", "0.5")
    assert finish(rep) == (0, b"anyone?", "")
    code, out, err = finish(req)
    assert (code, out) == (1, b"")
    assert err == "gsp cat: nothing received within --recv-timeout 0.5 s (gsp.Timeout)\n"


def test_cat_respondent_answers_cat_surveyor(cats: Cats, url: str) -> None:
    resp = cats.start("-v", "--respondent", "--listen", url, "--data", "here", "-C", "1", "-A")
    bound = listening(resp)  # the survey must find the respondent connected: wait for it
    assert bound == url
    surveyor = cats.start("--surveyor", "--dial", url, "--data", "roll call", "-A",
                          "-o", "survey_time=1")
    assert finish(surveyor) == (0, b"here\n", "")
    assert finish(resp) == (0, b"roll call\n", "")


def test_cat_listener_on_port_zero_says_its_port(cats: Cats) -> None:
    pull = cats.start("-v", "--pull0", "-L", "0", "-C", "1", "--raw")
    bound = listening(pull)
    assert bound.startswith("tcp://127.0.0.1:") and not bound.endswith(":0")
    assert cats.run("--push0", "-l", bound.rsplit(":", 1)[1], "-D", "x") == (0, b"", "")
    assert finish(pull) == (0, b"x", "")


def test_cat_over_tls_with_certificate_options(cats: Cats, pki: PKI) -> None:
    url = free_url("tls+tcp").replace("127.0.0.1", "localhost")
    pull = cats.start("--pull", "--listen", url, "--cert", pki.server_cert_file,
                      "--key", pki.server_key_file, "--count", "2", "--raw")
    verified = cats.start("--push", "--dial", url, "--async", "--cacert", pki.ca_file,
                          "--data", "a")
    assert finish(verified) == (0, b"", "")
    insecure = cats.run("--push", "--dial", url, "--insecure", "--data", "b")
    assert insecure == (0, b"", "")
    assert finish(pull) == (0, b"ab", "")
    code, _, err = cats.run("--push", "--dial", url, "--cacert", pki.rogue_ca_file, "-D", "c")
    assert code == 1 and err.startswith("gsp cat: ") and err.count("\n") == 1, err

