"""gsp_ws._frames, the WebSocket frame codec of ws:// and wss://, sans-IO: against wsproto as the
reference peer both ways (masked and not, cut into frames, fed in every split), and every frame
RFC 6455 forbids refused with its close code and a typed error; then a hostile client over a real
listener: the bad pipe closes with that code and the socket serves the others."""

from __future__ import annotations

import os
import struct
import time
from typing import Any

import pytest
from wsproto.connection import Connection as WSProto
from wsproto.connection import ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping

import gsp
from gsp.testing import wait_for
from gsp_ws import _frames
from gsp_ws._frames import FrameError, Framer
from tests.support.whitebox import reader_of
from tests.support.ws_support import RawClient, close_from_gsp, port_of

MiB = 1 << 20
#: The room the codec reads ahead into beyond what a message has brought so far.
ROOM = _frames._ROOM


def test_masking_is_compiled():
    """websockets' C apply_mask does the XOR (its pure-Python fallback is 50 times slower)."""
    assert _frames.COMPILED_MASK
    data, key = os.urandom(70_001), os.urandom(4)
    expected = bytes(b ^ key[i % 4] for i, b in enumerate(data))
    assert _frames.apply_mask(memoryview(data), key) == expected


def encode(framer: Framer, payload: bytes, frame_max: int) -> bytes:
    pieces: list[Any] = []
    framer.frames(payload, len(payload), pieces, frame_max)
    return b"".join(bytes(p) for p in pieces)


@pytest.mark.parametrize("client", [True, False])
@pytest.mark.parametrize("size,frame_max", [(0, 0), (16, 0), (125, 0), (126, 0), (65535, 0),
                                            (65536, 0), (200_000, 65536), (65536, 65536),
                                            (1000, 7)])
def test_what_gsp_sends_wsproto_reads(client, size, frame_max):
    payload = os.urandom(size)
    wire = encode(Framer(client), payload, frame_max)
    peer = WSProto(ConnectionType.SERVER if client else ConnectionType.CLIENT)
    peer.receive_data(wire)
    events = list(peer.events())
    assert all(isinstance(e, BytesMessage) for e in events)
    assert b"".join(e.data for e in events) == payload
    assert events[-1].message_finished and not any(e.message_finished for e in events[:-1])
    frames = max(1, -(-size // frame_max)) if frame_max else 1
    assert len(events) == frames


@pytest.mark.parametrize("client", [True, False])
def test_what_wsproto_sends_gsp_reads_in_any_split(client):
    """Messages whole or in fragments, a Ping between fragments, every size encoding, fed in
    one piece, a byte at a time and in uneven pieces: the same messages, nothing held after."""
    peer = WSProto(ConnectionType.SERVER if client else ConnectionType.CLIENT)
    big = os.urandom(70_000)
    wire = (peer.send(BytesMessage(data=b"one")) + peer.send(BytesMessage(data=b"")) +
            peer.send(BytesMessage(data=b"fr", message_finished=False)) +
            peer.send(Ping(payload=b"hi")) +
            peer.send(BytesMessage(data=b"ag", message_finished=True)) +
            peer.send(BytesMessage(data=big)) + peer.send(BytesMessage(data=b"y" * 300)))
    want = [b"one", b"", b"frag", big, b"y" * 300]
    for step in (len(wire), 1, 7, 4096):
        f = Framer(client)
        got: list[bytes] = []
        for i in range(0, len(wire), step):
            got += f.feed(wire[i:i + step])
        assert got == want, step
        assert f.controls == [(_frames.OP_PING, b"hi")]
        assert f.between_frames and f.held == 0


def test_a_partial_message_is_held_as_its_payload():
    peer = WSProto(ConnectionType.CLIENT)
    wire = peer.send(BytesMessage(data=b"the first half", message_finished=False)) + \
        peer.send(BytesMessage(data=b"x" * 1000))[:500]
    f = Framer(False)
    assert f.feed(wire) == []
    assert f.held == 14 + 500 - 8  # the finished frame, and what came of the next one's payload
    assert f.payload_left == 1000 - (500 - 8)


def test_control_frames_and_close():
    f = Framer(True)
    ping = f.control(_frames.OP_PING, b"abc")
    peer = WSProto(ConnectionType.SERVER)
    peer.receive_data(ping)
    (ev,) = peer.events()
    assert isinstance(ev, Ping) and ev.payload == b"abc"
    frame = f.close_frame(1000, "bye")
    assert frame is not None and f.state == _frames.LOCAL_CLOSING
    assert f.close_frame(1000) is None  # one Close only
    peer.receive_data(frame)
    (ev,) = peer.events()
    assert isinstance(ev, CloseConnection) and (ev.code, ev.reason) == (1000, "bye")
    assert _frames.parse_close(b"") == (1005, "")
    assert _frames.parse_close(struct.pack(">H", 4000) + "é".encode()) == (4000, "é")


def unmasked(b0: int, payload: bytes) -> bytes:
    return bytes([b0, len(payload)]) + payload


def masked(b0: int, payload: bytes, length: bytes | None = None) -> bytes:
    return bytes([b0]) + (length or bytes([0x80 | len(payload)])) + bytes(4) + payload


BAD_FROM_CLIENT = [
    (unmasked(0x82, b"x"), 1002, gsp.BadFrame),  # a client's frame must be masked
    (masked(0xC2, b"x"), 1002, gsp.BadFrame),  # RSV1 without an extension
    (masked(0x83, b"x"), 1002, gsp.BadFrame),  # a reserved data opcode
    (masked(0x8B, b""), 1002, gsp.BadFrame),  # a reserved control opcode
    (masked(0x09, b"x"), 1002, gsp.BadFrame),  # a fragmented Ping
    (masked(0x89, b"x" * 126, bytes([0xFE, 0, 126])), 1002, gsp.BadFrame),  # a Ping over 125
    (masked(0x80, b"x"), 1002, gsp.BadFrame),  # a continuation with no message begun
    (masked(0x02, b"x") + masked(0x82, b"y"), 1002, gsp.BadFrame),  # a new message mid-message
    (masked(0x82, b"x" * 5, bytes([0xFE, 0, 5])), 1002, gsp.BadFrame),  # 16-bit length of 5
    (masked(0x82, b"", bytes([0xFF]) + struct.pack(">Q", 1 << 63)), 1002, gsp.BadFrame),
    (masked(0x81, b"text"), 1003, gsp.BadFrame),  # text, where ws_recv_text is off
    (masked(0x88, b"\x03"), 1002, gsp.BadFrame),  # a Close of one byte
    (masked(0x88, struct.pack(">H", 999)), 1002, gsp.BadFrame),
    (masked(0x88, struct.pack(">H", 1005)), 1002, gsp.BadFrame),  # local-only code
    (masked(0x88, struct.pack(">H", 2000)), 1002, gsp.BadFrame),  # reserved code
    (masked(0x88, struct.pack(">H", 1000) + b"\xff"), 1007, gsp.BadFrame),
    (masked(0x82, b"x" * 2000, bytes([0xFE]) + struct.pack(">H", 2000)), 1009,
     gsp.MessageTooLarge),  # over max_frame, refused by its header
]


@pytest.mark.parametrize("wire,code,error", BAD_FROM_CLIENT)
def test_frames_the_rfc_forbids_are_refused(wire, code, error):
    f = Framer(False, max_frame=1000, max_msg=1500)
    good = masked(0x82, b"before")
    with pytest.raises(FrameError) as info:
        got = f.feed(good + wire)
        assert got == [b"before"]  # the message before the bad frame comes first
        for op, payload in f.controls:
            if op == _frames.OP_CLOSE:
                _frames.parse_close(payload)
        f.feed(b"")  # the error comes with the next feed
    assert (info.value.code, info.value.error) == (code, error)


def test_a_masked_frame_from_the_server_and_bad_text():
    with pytest.raises(FrameError) as info:
        Framer(True).feed(masked(0x82, b"x"))
    assert info.value.code == 1002
    with pytest.raises(FrameError) as info:  # a 16-bit length of 124, the read its whole frame
        Framer(True).feed(bytes([0x82, 126]) + struct.pack(">H", 124) + b"x" * 124)
    assert info.value.code == 1002
    assert Framer(True).feed(unmasked(0x82, b"y" * 125)) == [b"y" * 125]
    for client, frame in ((True, unmasked(0x82, b"z" * 11)), (False, masked(0x82, b"z" * 11))):
        with pytest.raises(FrameError) as info:  # over the limit, in a read of its own
            Framer(client, max_msg=10).feed(frame)
        assert info.value.code == 1009
    f = Framer(False, text_ok=True)
    assert f.feed(masked(0x81, "é".encode())) == ["é".encode()]
    with pytest.raises(FrameError) as info:
        f.feed(masked(0x01, b"\xc3") + masked(0x80, b"\x28"))  # bad UTF-8 across fragments
    assert info.value.code == 1007


def test_a_message_over_recv_max_size_across_frames():
    f = Framer(False, max_frame=1000, max_msg=1500)
    assert f.feed(masked(0x02, b"a" * 100)) == []
    with pytest.raises(FrameError) as info:
        f.feed(masked(0x00, b"b" * 1000, bytes([0xFE]) + struct.pack(">H", 1000)) +
               masked(0x80, b"c" * 1000, bytes([0xFE]) + struct.pack(">H", 1000)))
    assert (info.value.code, info.value.error) == (1009, gsp.MessageTooLarge)


@pytest.mark.parametrize("wire,code", [(unmasked(0x82, b"x"), 1002), (masked(0xC2, b"x"), 1002),
                                       (masked(0x88, struct.pack(">H", 1005)), 1002)])
def test_a_hostile_client_closes_only_its_pipe(gsp_socket, wire, code):
    pull = gsp_socket("pull", recv_timeout=5)
    url = pull.listen("ws://127.0.0.1:0/sp").url
    bad = RawClient(port_of(url), protocols=("pull.sp.nanomsg.org",))
    good = RawClient(port_of(url), protocols=("pull.sp.nanomsg.org",))
    try:
        good.send(BytesMessage(data=b"first"))
        assert pull.recv() == b"first"
        bad.sock.sendall(wire)
        assert bad.next_event(CloseConnection).code == code
        assert bad.eof()
        good.send(BytesMessage(data=b"still"))
        assert pull.recv() == b"still"
        wait_for(lambda: len(pull.pipes) == 1, what="the bad pipe gone")
    finally:
        bad.close()
        good.close()


def test_an_idle_ws_pipe_parks_and_still_pings_and_closes_cleanly(gsp_socket):
    """Between messages a ws pipe holds no reader greenlet (it parks, as tcp's do), yet its
    ws_ping_interval still pings a silent peer, and a Close from gsp waits for the answer."""
    pull = gsp_socket("pull", recv_timeout=5)
    url = pull.listen("ws://127.0.0.1:0/sp", ws_ping_interval=0.3,
                      ws_ping_timeout=5).url
    raw = RawClient(port_of(url), protocols=("pull.sp.nanomsg.org",))
    try:
        raw.send(BytesMessage(data=b"one"))
        assert pull.recv() == b"one"
        (pipe,) = pull.pipes
        assert pipe._parks
        wait_for(lambda: reader_of(pipe) is None, what="the pipe parked")
        t0 = time.monotonic()
        assert raw.next_event(Ping).payload == b"gsp"  # the parked pipe's timer woke it
        assert time.monotonic() - t0 < 5
        raw.send(BytesMessage(data=b"two"))
        assert pull.recv() == b"two"
        wait_for(lambda: reader_of(pipe) is None, what="the pipe parked again")
        close_from_gsp(raw, pipe)
    finally:
        raw.close()


# -- big messages: assembled in one buffer, received into it ---------------------------------------

def test_mask_into_is_compiled_and_masks_in_place_at_any_phase():
    """gsp_ws._mask (built with the plugin) XORs into a buffer it is given, from any byte of a
    frame's payload (the phase), in place too; the fallback without it gives the same bytes."""
    assert _frames.COMPILED_MASK_INTO
    key = os.urandom(4)
    for size in (0, 1, 3, 7, 8, 31, 32, 33, 70_001):
        data = os.urandom(size)
        for phase in range(6):
            expected = bytes(b ^ key[(i + phase) % 4] for i, b in enumerate(data))
            for mask_into in (_frames.mask_into, _frames._mask_into_py):
                out = bytearray(size + 5)
                mask_into(out, data, key, phase)
                assert out == expected + bytes(5), (size, phase)
                inplace = bytearray(data)
                view = memoryview(inplace)
                mask_into(view, view, key, phase)
                assert inplace == expected
    with pytest.raises(ValueError):
        _frames.mask_into(bytearray(3), b"four", key, 0)  # the destination must hold it
    with pytest.raises(ValueError):
        _frames.mask_into(bytearray(4), b"four", b"abc", 0)
    with pytest.raises(TypeError):
        _frames.mask_into(b"read only", b"four", key, 0)


def frame(first: int, payload: bytes, key: bytes | None) -> bytes:
    """One frame as a peer sends it (masked with ``key`` when given)."""
    head = _frames.header(first, len(payload), key)
    return head + (_frames.apply_mask(payload, key) if key is not None else payload)


def read_as_the_pipe_does(f: Framer, wire: bytes, step: int) -> list[bytes]:
    """What WSConnection.recv_messages does with ``wire`` arriving ``step`` bytes at a time:
    into the framer's room while it offers one (a big message's payload), else fed what a read
    of the size it asks for brings."""
    got: list[bytes] = []
    pos = 0
    while pos < len(wire):
        room = f.room()
        if room is None:
            n = min(step, f.read_size(step))
            assert n > 0
            got += f.feed(wire[pos:pos + n])
            pos += n
            continue
        n = min(len(room), step, len(wire) - pos)
        assert n > 0
        room[:n] = wire[pos:pos + n]
        got += f.filled(n)
        pos += n
    return got


SIZES = [(125, 0), (126, 0), (_frames.DIRECT_MIN - 1, 0), (_frames.DIRECT_MIN, 0), (65535, 0),
         (65536, 0), (65537, 0), (200_000, 65536), (MiB + 3, 65536), (40_000, 1000)]


@pytest.mark.parametrize("client", [True, False])
@pytest.mark.parametrize("size,frame_max", SIZES)
def test_big_messages_are_read_into_their_buffer_in_any_split(client, size, frame_max):
    """A message around every length boundary (7, 16 and 64-bit lengths, the size from which a
    frame goes into the message's buffer), whole or cut into frames, masked (to a server) or
    not, arriving in reads of any size, between small messages: the same bytes out."""
    payload = os.urandom(size)
    pieces: list[Any] = []
    Framer(not client).frames(payload, size, pieces, frame_max)
    wire_big = b"".join(bytes(p) for p in pieces)
    other = Framer(not client)
    wire = other.frame(b"before") + wire_big + other.frame(b"after") + wire_big
    for step in (len(wire), 65536 + 14, 4096, 1000, 333):
        f = Framer(client)
        assert read_as_the_pipe_does(f, wire, step) == [b"before", payload, b"after", payload]
        assert f.between_frames and f.held == 0
        # (between big messages, the next one's header and body are received into its buffer)
        assert (f.room() is None) == (min(size, frame_max or size) < _frames.DIRECT_MIN)


@pytest.mark.parametrize("client", [True, False])
def test_big_messages_in_a_row_are_received_into_their_buffer_one_by_one(client):
    """Big messages back to back, all of them there at once (a reader behind its peer): once
    one was big, the next frame's header and payload are received into the message's buffer
    (one read of the last frame's size), and the message is one copy out of it: never a read of
    several big messages into fresh objects (fresh pages for each: see Framer.room). Sizes that
    change cost a read more, still into the buffer."""
    key = None if client else b"\x01\x02\x03\x04"
    payloads = [os.urandom(n) for n in (65536, 65536, 65536, 70_000, 65535, 200_000, 65536)]
    frames = [frame(0x82, p, key) for p in payloads]
    frames.insert(3, frame(0x89, b"ping", key))  # a control frame where a big one is expected
    wire = b"".join(frames) + frame(0x82, b"small", key)
    f = Framer(client)
    chunk = 150_000  # the first read: two big frames whole, the start of the third
    got: list[bytes] = []
    fed: list[int] = []  # reads of their own (bytes objects): not into the buffer
    reads = 0
    most = 0  # big messages a read completed, after the first
    pos = 0
    while pos < len(wire):
        room = f.room()
        if room is not None:
            n = min(len(room), len(wire) - pos)
            room[:n] = wire[pos:pos + n]
            out = f.filled(n)
        else:
            n = min(len(wire) - pos, f.read_size(chunk))
            fed.append(n)
            out = f.feed(wire[pos:pos + n])
        reads += 1
        if reads > 1:
            most = max(most, sum(len(m) >= _frames.DIRECT_MIN for m in out))
        got += out
        pos += n
    assert got == payloads + [b"small"]
    assert f.controls == [(_frames.OP_PING, b"ping")]
    assert fed[0] == chunk
    assert most <= 2  # a read's big messages: one, or the end of one and the next, whole
    assert all(n < _frames.DIRECT_MIN for n in fed[1:]), fed  # no big payload read apart
    assert reads <= 2 * len(frames)  # a read a frame, two where the size changed
    assert f.room() is None and f.read_size(4096) == 4096  # small again: the usual reads


@pytest.mark.parametrize("client", [True, False])
def test_a_big_message_in_frames_of_every_size_with_controls_between(client):
    """Small frames, then big ones, then small again, in one message, a Ping and a Pong between
    them (control frames may come between a message's frames): the message once, whole."""
    key = None if client else b"\x01\x02\x03\x04"
    parts = [os.urandom(n) for n in (10, 300, 70_000, 5, 20_000, 65536, 1)]
    wire = frame(0x02, parts[0], key) + frame(0x00, parts[1], key)
    wire += frame(0x89, b"ping", key)
    for p in parts[2:-1]:
        wire += frame(0x00, p, key) + frame(0x8A, b"pong", key)
    wire += frame(0x80, parts[-1], key) + frame(0x82, b"next", key)
    for step in (len(wire), 70_014, 8192, 1, 777):
        f = Framer(client)
        got = read_as_the_pipe_does(f, wire, step) if step > 1 else \
            [m for i in range(len(wire)) for m in f.feed(wire[i:i + 1])]
        assert got == [b"".join(parts), b"next"], step
        assert f.controls == [(_frames.OP_PING, b"ping")] + [(_frames.OP_PONG, b"pong")] * 4
        assert f.between_frames and f.held == 0


def test_a_big_message_is_held_as_the_bytes_received_not_as_announced():
    """A header announcing 1 MiB and 100 bytes of it: 100 bytes held, and the buffer made for it
    follows what came (room ahead within a bound), never the size announced."""
    f = Framer(False, max_msg=MiB)
    key = os.urandom(4)
    wire = frame(0x82, os.urandom(MiB), key)
    assert f.feed(wire[:14 + 100]) == []
    assert f.held == 100 and f.payload_left == MiB - 100
    room = f.room()
    assert room is not None and len(room) <= 2 * (100 + ROOM)
    assert f.big_buffer is not None and len(f.big_buffer) <= 2 * (100 + ROOM)
    n = len(room)
    room[:] = wire[114:114 + n]
    del room
    assert f.filled(n) == [] and f.held == 100 + n
    got = 100 + n
    while got < 200_000:  # it grows by what arrives, doubling at most
        room = f.room()
        assert room is not None and got + len(room) <= 2 * (got + ROOM)
        n = len(room)
        room[:] = wire[14 + got:14 + got + n]
        del room
        assert f.filled(n) == []
        got += n
    assert f.held == got and len(f.big_buffer or b"") <= 2 * (got + ROOM)


def test_an_announced_oversize_is_refused_before_a_buffer_is_made():
    """max_recv_size and ws_max_frame_size refuse a frame by its header: no buffer is made for
    it (the first frame of a message), nor grown for it (a later one)."""
    key = os.urandom(4)
    f = Framer(False, max_msg=MiB)
    with pytest.raises(FrameError) as info:
        f.feed(frame(0x82, bytes(MiB + 1), key)[:14])
    assert (info.value.code, info.value.error) == (1009, gsp.MessageTooLarge)
    assert f.big_buffer is None and f.held == 0
    f = Framer(False, max_msg=MiB)
    first = frame(0x02, os.urandom(600_000), key)
    assert read_as_the_pipe_does(f, first, 65536) == []
    assert f.held == 600_000
    made = len(f.big_buffer or b"")
    with pytest.raises(FrameError) as info:
        f.feed(frame(0x80, bytes(500_000), key)[:14])
    assert info.value.code == 1009 and len(f.big_buffer or b"") == made
    f = Framer(False, max_frame=65536)
    with pytest.raises(FrameError) as info:
        f.feed(frame(0x82, bytes(65537), key)[:14])
    assert info.value.code == 1009 and f.big_buffer is None


def test_big_text_is_checked_as_utf8_when_whole():
    key = os.urandom(4)
    text = ("é" * 40_000).encode()
    f = Framer(False, text_ok=True)
    wire = frame(0x01, text[:50_000], key) + frame(0x80, text[50_000:], key)
    assert read_as_the_pipe_does(f, wire, 4096) == [text]
    bad = frame(0x01, text[:50_001], key) + frame(0x80, text[50_002:], key)  # a cut character
    with pytest.raises(FrameError) as info:
        read_as_the_pipe_does(Framer(False, text_ok=True), bad, 4096)
    assert info.value.code == 1007
