"""gsp.transport.wire, the sans-IO SP codec: stream framing (tcp and ipc). Encoding; decoding as a property
(any split of the stream, in any buffer form, gives the same messages; garbage raises only wire
errors; valid frames before a bad one are still delivered); limits and errors (a huge frame refused
from its length prefix, max_size, ipc type bytes, a decoder dead after an error); runs of
equal-size frames (the split fast path) and join_bodies. The handshake is in
test_wire_handshake.py."""

from __future__ import annotations

import struct
from typing import Any, Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

import gsp
from gsp.transport import wire
from gsp.transport.wire import IPC, TCP, FrameDecoder, Framing, encode_frames
from tests.support import wire_settings as _settings

pytestmark = pytest.mark.core


def frame(framing: Framing, payload: bytes) -> bytes:
    return b"".join(encode_frames(framing, [(b"", payload)]))


def feed_all(dec: FrameDecoder, pieces: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for p in pieces:
        out.extend(dec.feed(p))
    return out


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


# -- encoding ----------------------------------------------------------------------------------

def test_encode_frames_bytes() -> None:
    msgs = [(b"\x80\x00\x00\x01", b"hello"), (b"", b""), (b"", b"x")]
    tcp = b"".join(encode_frames(TCP, msgs))
    assert tcp == (
        struct.pack(">Q", 9) + b"\x80\x00\x00\x01hello"
        + struct.pack(">Q", 0)
        + struct.pack(">Q", 1) + b"x"
    )
    ipc = b"".join(encode_frames(IPC, msgs))
    assert ipc == (
        b"\x01" + struct.pack(">Q", 9) + b"\x80\x00\x00\x01hello"
        + b"\x01" + struct.pack(">Q", 0)
        + b"\x01" + struct.pack(">Q", 1) + b"x"
    )
    assert encode_frames(TCP, []) == []
    assert (TCP.prefix_size, IPC.prefix_size, IPC.type_byte) == (8, 9, 0x01)


def test_encode_frames_does_not_copy_bodies() -> None:
    body = b"b" * 1000
    parts = encode_frames(TCP, [(b"", body)])
    assert parts[-1] is body


# -- decoding: properties ----------------------------------------------------------------------

_messages = st.lists(
    st.tuples(st.binary(max_size=12), st.binary(max_size=300)), max_size=12,
)
_framings = st.sampled_from([TCP, IPC])
_cuts = st.lists(st.integers(min_value=0), max_size=30)
_kinds = st.sampled_from(["bytes", "bytearray", "memoryview", "reused"])


def _feeder(kind: str, dec: FrameDecoder) -> Callable[[bytes], list[bytes]]:
    """Feed pieces in the given form; "reused" mimics StreamConnection's recv_into buffer."""
    if kind == "bytes":
        return dec.feed
    if kind == "bytearray":
        return lambda p: dec.feed(bytearray(p))
    if kind == "memoryview":
        return lambda p: dec.feed(memoryview(p))
    buf = bytearray(4096)
    view = memoryview(buf)

    def reused(p: bytes) -> list[bytes]:
        out: list[bytes] = []
        for i in range(0, len(p), len(buf)):
            chunk = p[i:i + len(buf)]
            buf[:len(chunk)] = chunk
            out.extend(dec.feed(view[:len(chunk)]))
            buf[:] = b"\xee" * len(buf)  # the next recv_into overwrites the buffer
        return out

    return reused


@given(msgs=_messages, framing=_framings, cuts=_cuts, kind=_kinds, limit=st.booleans())
@_settings
def test_any_split_decodes_the_same_messages(
        msgs: list[tuple[bytes, bytes]], framing: Framing, cuts: list[int], kind: str,
        limit: bool) -> None:
    stream = b"".join(encode_frames(framing, msgs))
    biggest = max((len(h) + len(b) for h, b in msgs), default=0)
    dec = FrameDecoder(framing, max_size=biggest if limit and biggest else 0)
    feed = _feeder(kind, dec)
    out: list[bytes] = []
    for piece in split(stream, cuts):
        out.extend(feed(piece))
    assert out == [h + b for h, b in msgs]
    assert all(type(m) is bytes for m in out)
    assert dec.buffered == 0


@given(msgs=_messages, framing=_framings, data=st.data())
@_settings
def test_buffered_counts_the_incomplete_frame(
        msgs: list[tuple[bytes, bytes]], framing: Framing, data: st.DataObject) -> None:
    stream = b"".join(encode_frames(framing, msgs))
    cut = data.draw(st.integers(0, len(stream)))
    dec = FrameDecoder(framing)
    done = dec.feed(stream[:cut])
    consumed = sum(framing.prefix_size + len(m) for m in done)
    assert dec.buffered == cut - consumed
    assert done + dec.feed(stream[cut:]) == [h + b for h, b in msgs]


@given(
    garbage=st.binary(max_size=400), framing=_framings, cuts=_cuts,
    max_size=st.sampled_from([0, 1, 16, 300]),
)
@_settings
def test_garbage_raises_only_wire_errors(
        garbage: bytes, framing: Framing, cuts: list[int], max_size: int) -> None:
    dec = FrameDecoder(framing, max_size=max_size)
    try:
        for piece in split(garbage, cuts):
            for m in dec.feed(piece):
                assert type(m) is bytes
                assert not max_size or len(m) <= max_size
    except gsp.WireError as exc:
        error = type(exc)
    else:
        return
    # Dead after an error: every later feed raises the same kind of error.
    for later in (b"", frame(framing, b"ok"), garbage):
        with pytest.raises(error):
            dec.feed(later)


@given(prefix=_messages, framing=_framings, cuts=_cuts,
       bad=st.sampled_from(["too_large", "type_byte"]))
@_settings
def test_error_after_valid_frames_in_any_split(
        prefix: list[tuple[bytes, bytes]], framing: Framing, cuts: list[int], bad: str) -> None:
    stream = b"".join(encode_frames(framing, prefix))
    if bad == "too_large" or framing is TCP:
        tail, error = b"\x01" * framing.prefix_size, gsp.MessageTooLarge
    else:
        tail, error = b"\x02" + struct.pack(">Q", 1), gsp.BadFrame
    dec = FrameDecoder(framing, max_size=1000)
    out: list[bytes] = []
    with pytest.raises(error):
        for piece in split(stream + tail + b"more", cuts):
            out.extend(dec.feed(piece))
        dec.feed(b"")  # the error surfaces here at the latest
    # Every valid message before the bad frame is delivered, whatever the split: a feed that
    # completes messages returns them and keeps the error for the next feed.
    assert out == [h + b for h, b in prefix]
    assert isinstance(dec.error, error)
    with pytest.raises(error):
        dec.feed(b"")


# -- decoding: limits and errors ----------------------------------------------------------------

@pytest.mark.parametrize("framing", [TCP, IPC], ids=["tcp", "ipc"])
def test_huge_frame_rejected_from_its_length_prefix_byte_by_byte(framing: Framing) -> None:
    prefix = frame(framing, b"")[:-8] + struct.pack(">Q", 2 << 30)  # announce 2 GiB
    dec = FrameDecoder(framing, max_size=1 << 20)
    for b in prefix[:-1]:
        assert dec.feed(bytes([b])) == []
    assert dec.buffered == framing.prefix_size - 1
    with pytest.raises(gsp.MessageTooLarge) as info:
        dec.feed(prefix[-1:])
    assert (info.value.size, info.value.limit) == (2 << 30, 1 << 20)
    assert dec.buffered <= framing.prefix_size
    with pytest.raises(gsp.MessageTooLarge):
        dec.feed(b"\x00" * 100)
    assert dec.buffered <= framing.prefix_size


@pytest.mark.parametrize("framing", [TCP, IPC], ids=["tcp", "ipc"])
@pytest.mark.parametrize("lead", [b"", b"whole"], ids=["alone", "after-a-frame"])
def test_huge_frame_rejected_in_one_chunk(framing: Framing, lead: bytes) -> None:
    prefix = frame(framing, b"")[:-8] + struct.pack(">Q", 2 << 30)
    dec = FrameDecoder(framing, max_size=1 << 20)
    data = (frame(framing, lead) if lead else b"") + prefix + b"\x00" * 4096
    if lead:  # the good frame in the same chunk is returned; the error comes next
        assert dec.feed(data) == [lead]
        assert isinstance(dec.error, gsp.MessageTooLarge)
    with pytest.raises(gsp.MessageTooLarge) as info:
        dec.feed(data)
    assert (info.value.size, info.value.limit) == (2 << 30, 1 << 20)  # for the log line
    assert dec.buffered <= framing.prefix_size


@pytest.mark.parametrize("framing", [TCP, IPC], ids=["tcp", "ipc"])
def test_huge_frame_after_partial_frame(framing: Framing) -> None:
    # The prefix is completed across feeds while a previous frame was pending.
    dec = FrameDecoder(framing, max_size=1 << 20)
    ok = frame(framing, b"abc")
    huge = frame(framing, b"")[:-8] + struct.pack(">Q", 2 << 30)
    assert dec.feed(ok[:-1]) == []
    assert dec.feed(ok[-1:] + huge[:-2]) == [b"abc"]
    with pytest.raises(gsp.MessageTooLarge):
        dec.feed(huge[-2:])
    assert dec.buffered <= framing.prefix_size


@pytest.mark.parametrize("framing", [TCP, IPC], ids=["tcp", "ipc"])
@pytest.mark.parametrize("bytewise", [False, True], ids=["chunk", "bytewise"])
def test_max_size_boundary(framing: Framing, bytewise: bool) -> None:
    limit = 64

    def run(payload: bytes) -> list[bytes]:
        dec = FrameDecoder(framing, max_size=limit)
        data = frame(framing, payload)
        return feed_all(dec, [data[i:i + 1] for i in range(len(data))] if bytewise else [data])

    exact = b"e" * limit
    assert run(exact) == [exact]
    # max_size counts header and body together.
    dec = FrameDecoder(framing, max_size=limit)
    assert dec.feed(b"".join(encode_frames(framing, [(b"h" * 4, b"b" * (limit - 4))]))) == [
        b"h" * 4 + b"b" * (limit - 4)]
    with pytest.raises(gsp.MessageTooLarge):
        run(b"e" * (limit + 1))


def test_one_whole_frame_per_feed_keeps_every_rule() -> None:
    """A feed of exactly one whole tcp frame between frames (a request or a reply, read at
    once) is the decoder's shortest path; it still refuses a frame over max_size, never
    resumes after an error, and leaves nothing buffered."""
    dec = FrameDecoder(TCP, max_size=8)
    for body in (b"", b"a", b"12345678"):
        assert dec.feed(frame(TCP, body)) == [body] and dec.buffered == 0
    assert dec.feed(bytearray(frame(TCP, b"view"))) == [b"view"]  # any buffer, as bytes
    with pytest.raises(gsp.MessageTooLarge):
        dec.feed(frame(TCP, b"123456789"))
    assert isinstance(dec.error, gsp.MessageTooLarge) and dec.buffered == 0
    with pytest.raises(gsp.MessageTooLarge):
        dec.feed(frame(TCP, b"ok"))  # a whole frame after the error: the error again
    # Mid-frame, a chunk that is a whole frame is the body of the frame in progress.
    dec = FrameDecoder(TCP)
    inner = frame(TCP, b"x" * 16)
    assert dec.feed(struct.pack(">Q", len(inner))) == [] and dec.buffered == 8
    assert dec.feed(inner) == [inner] and dec.buffered == 0


@pytest.mark.parametrize("framing", [TCP, IPC], ids=["tcp", "ipc"])
def test_a_body_fed_whole_is_the_message_itself(framing: Framing) -> None:
    """body_wanted's promise: a reader that reads exactly the wanted body in one piece gets that
    very object back, not a copy (compiled with mypyc too, where a full slice would copy)."""
    dec = FrameDecoder(framing)
    body = bytes(range(256)) * 300
    data = frame(framing, body)
    head = framing.prefix_size
    assert dec.feed(data[:head]) == [] and dec.body_wanted == len(body)
    got = dec.feed(body)
    assert got == [body] and got[0] is body and dec.buffered == 0


def test_max_size_zero_is_unlimited() -> None:
    dec = FrameDecoder(TCP, max_size=0)
    big = b"z" * (1 << 20)
    assert dec.feed(frame(TCP, big)) == [big]


@pytest.mark.parametrize("type_byte", [0x00, 0x02, 0xFF])
@pytest.mark.parametrize("bytewise", [False, True], ids=["chunk", "bytewise"])
def test_ipc_bad_type_byte(type_byte: int, bytewise: bool) -> None:
    data = bytes([type_byte]) + struct.pack(">Q", 3) + b"abc"
    dec = FrameDecoder(IPC)
    with pytest.raises(gsp.BadFrame):
        feed_all(dec, [data[i:i + 1] for i in range(len(data))] if bytewise else [data])
    with pytest.raises(gsp.BadFrame):
        dec.feed(frame(IPC, b"fine"))


def test_ipc_bad_type_byte_on_a_later_frame() -> None:
    dec = FrameDecoder(IPC)
    assert dec.feed(frame(IPC, b"one")) == [b"one"]
    with pytest.raises(gsp.BadFrame):
        dec.feed(b"\x00" + struct.pack(">Q", 3) + b"two")


def test_tcp_stream_is_not_ipc() -> None:
    # An ipc decoder reading tcp framing sees a zero type byte.
    with pytest.raises(gsp.BadFrame):
        FrameDecoder(IPC).feed(frame(TCP, b"hello"))


@pytest.mark.parametrize("make", [
    lambda: (FrameDecoder(TCP, max_size=4), frame(TCP, b"12345"), gsp.MessageTooLarge),
    lambda: (FrameDecoder(IPC), b"\x07" + struct.pack(">Q", 0), gsp.BadFrame),
], ids=["too-large", "bad-frame"])
def test_decoder_keeps_raising_after_an_error(make: Callable[[], Any]) -> None:
    dec, bad, error = make()
    with pytest.raises(error):
        dec.feed(bad)
    for later in (b"", frame(dec.framing, b"ok"), b"\x00" * 20):
        with pytest.raises(error):
            dec.feed(later)


def test_wire_errors_are_gsp_errors() -> None:
    for cls in (gsp.MessageTooLarge, gsp.BadFrame, gsp.HandshakeError):
        assert issubclass(cls, gsp.WireError) and issubclass(cls, gsp.GspError)


def test_empty_frames_and_empty_feeds() -> None:
    dec = FrameDecoder(TCP)
    assert dec.feed(b"") == []
    assert dec.feed(frame(TCP, b"") * 3) == [b"", b"", b""]
    assert dec.feed(b"") == []
    data = frame(TCP, b"")
    assert dec.feed(data[:3]) == [] and dec.feed(b"") == [] and dec.feed(data[3:]) == [b""]
    assert dec.buffered == 0


# -- runs of equal-size frames (the split fast path) and join_bodies -----------------------------

# Bodies built from bytes that make up length prefixes (zeros, small sizes, the ipc type byte), so
# that a body often contains its own frame's prefix: the fast path must notice and fall back.
_prefixy = st.lists(st.sampled_from([0, 1, 3, 8, 16]), min_size=0, max_size=24).map(bytes)
_runs = st.lists(
    st.tuples(st.integers(0, 24), st.integers(1, 40), _prefixy),
    min_size=1, max_size=6,
).map(lambda spec: [(b * (n // max(len(b), 1) + 1))[:n] for n, count, b in spec
                    for _ in range(count)])


@given(bodies=_runs, framing=_framings, cuts=_cuts)
@_settings
def test_runs_of_equal_size_frames_decode_exactly(bodies: list[bytes], framing: Framing,
                                                  cuts: list[int]) -> None:
    stream = b"".join(encode_frames(framing, [(b"", b) for b in bodies]))
    assert feed_all(FrameDecoder(framing), [stream]) == bodies
    assert feed_all(FrameDecoder(framing), split(stream, cuts)) == bodies
    cache = wire.prefix_cache(framing)
    assert wire.join_bodies(cache, bodies) == stream


@pytest.mark.parametrize("framing", [TCP, IPC], ids=["tcp", "ipc"])
def test_run_whose_bodies_contain_the_prefix(framing: Framing) -> None:
    p = frame(framing, bytes(16))[:framing.prefix_size]  # the prefix announcing 16 bytes
    bodies = [bytes(16)] * 10 + [p + bytes(8)] * 10 + [(p * 2)[:16]] * 10
    stream = b"".join(frame(framing, b) for b in bodies)
    assert FrameDecoder(framing).feed(stream) == bodies


def test_run_then_other_sizes_then_an_incomplete_frame() -> None:
    bodies = [b"a" * 5] * 20 + [b"bb"] * 3 + [b"c" * 7]
    stream = b"".join(frame(TCP, b) for b in bodies) + frame(TCP, b"tail")[:10]
    dec = FrameDecoder(TCP)
    assert dec.feed(stream) == bodies
    assert dec.buffered == 10
    assert dec.feed(frame(TCP, b"tail")[10:]) == [b"tail"]


def test_run_with_a_bad_ipc_type_byte_keeps_the_good_frames() -> None:
    good = [b"x" * 4] * 12
    bad = b"\x02" + frame(IPC, b"y" * 4)[1:]
    dec = FrameDecoder(IPC)
    assert dec.feed(b"".join(frame(IPC, b) for b in good) + bad + frame(IPC, b"z" * 4)) == good
    with pytest.raises(gsp.BadFrame):
        dec.feed(b"")


def test_run_over_max_size_is_refused() -> None:
    dec = FrameDecoder(TCP, max_size=15)
    with pytest.raises(gsp.MessageTooLarge):
        dec.feed(frame(TCP, b"x" * 16) * 20)


def test_join_bodies_declines_what_it_cannot_frame_alone() -> None:
    cache = wire.prefix_cache(TCP)
    assert wire.join_bodies(cache, [b"a", gsp.Message(b"b", b"h")]) is None  # a header
    assert wire.join_bodies(cache, [gsp.Message(b"b")]) is None
    assert wire.join_bodies(cache, [b"a", b"x" * len(cache)]) is None  # too big to copy
    assert wire.join_bodies(cache, [b"x" * len(cache)] * 3) is None
    assert wire.join_bodies([], [b"a"]) is None  # a framing without a prefix cache
    assert wire.join_bodies(cache, [b"", b"", b"ab"]) == frame(TCP, b"") * 2 + frame(TCP, b"ab")
