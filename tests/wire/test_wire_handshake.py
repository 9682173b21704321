"""gsp.transport.wire, the sans-IO SP codec: the handshake. Every protocol's handshake round-trips and is
refused by a side expecting another protocol; bad magic, version and reserved bytes raise their
own error classes, checked in that order; any 8 bytes either parse back to themselves or raise a
HandshakeError. Stream framing is in test_wire_frames.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import gsp
from gsp.transport import wire
from gsp.transport.wire import handshake, parse_handshake
from tests.support import wire_settings as _settings

pytestmark = pytest.mark.core

# From the facts file: name -> (own protocol number, the peer protocol it accepts).
PROTOCOLS = {
    "pair0": (0x10, 0x10), "pair1": (0x11, 0x11), "pub": (0x20, 0x21), "sub": (0x21, 0x20),
    "req": (0x30, 0x31), "rep": (0x31, 0x30), "push": (0x50, 0x51), "pull": (0x51, 0x50),
    "surveyor": (0x62, 0x63), "respondent": (0x63, 0x62), "bus": (0x70, 0x70),
    "star": (0x640, 0x640),
}
HANDSHAKE_ERRORS = [gsp.BadMagic, gsp.BadVersion, gsp.BadReserved, gsp.WrongProtocol]


# -- handshake ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", PROTOCOLS)
def test_handshake_round_trip(name: str) -> None:
    own, peer = PROTOCOLS[name]
    hs = handshake(own)
    assert hs == b"\x00SP\x00" + own.to_bytes(2, "big") + b"\x00\x00"
    assert len(hs) == wire.HANDSHAKE_SIZE == 8
    assert parse_handshake(hs) == own
    assert parse_handshake(hs, own) == own
    for form in (bytearray(hs), memoryview(hs)):
        assert parse_handshake(form, own) == own
    # The peer accepts it, and a side that expects another protocol refuses it.
    assert parse_handshake(handshake(peer), peer) == peer
    others = {p for p, _ in PROTOCOLS.values()} - {own}
    for other in others:
        with pytest.raises(gsp.WrongProtocol) as ei:
            parse_handshake(hs, other)
        assert ei.value.expected == other and ei.value.got == own


@pytest.mark.parametrize("pos,value", [(0, 1), (0, 0xFF), (1, ord("s")), (2, ord("Q")), (1, 0)])
def test_bad_magic(pos: int, value: int) -> None:
    hs = bytearray(handshake(0x30))
    hs[pos] = value
    with pytest.raises(gsp.BadMagic):
        parse_handshake(bytes(hs), 0x30)


@pytest.mark.parametrize("version", [1, 2, 0xFF])
def test_bad_version(version: int) -> None:
    hs = bytearray(handshake(0x30))
    hs[3] = version
    with pytest.raises(gsp.BadVersion):
        parse_handshake(bytes(hs), 0x30)


@pytest.mark.parametrize("pos", [6, 7])
def test_bad_reserved(pos: int) -> None:
    hs = bytearray(handshake(0x30))
    hs[pos] = 1
    with pytest.raises(gsp.BadReserved):
        parse_handshake(bytes(hs), 0x30)


def test_handshake_error_precedence() -> None:
    # Every field is wrong: the first check (magic) decides, then version, then reserved.
    assert_raises_exactly(gsp.BadMagic, b"\x01SQ\x01\x00\x31\x01\x01", 0x30)
    assert_raises_exactly(gsp.BadVersion, b"\x00SP\x01\x00\x31\x01\x01", 0x30)
    assert_raises_exactly(gsp.BadReserved, b"\x00SP\x00\x00\x31\x01\x01", 0x30)
    assert_raises_exactly(gsp.WrongProtocol, b"\x00SP\x00\x00\x31\x00\x00", 0x30)


def assert_raises_exactly(cls: type[Exception], data: bytes, expected: int) -> None:
    with pytest.raises(gsp.HandshakeError) as ei:
        parse_handshake(data, expected)
    assert type(ei.value) is cls


def test_handshake_errors_are_distinct_classes_in_the_tree() -> None:
    for cls in HANDSHAKE_ERRORS:
        assert issubclass(cls, gsp.HandshakeError)
        assert issubclass(cls, gsp.WireError)
        assert issubclass(cls, gsp.GspError)
        for other in HANDSHAKE_ERRORS:
            if other is not cls:
                assert not issubclass(cls, other)
    assert len(set(HANDSHAKE_ERRORS)) == 4


@pytest.mark.parametrize("size", [0, 7, 9])
def test_handshake_wrong_length(size: int) -> None:
    with pytest.raises(ValueError):
        parse_handshake(b"\x00" * size)


@given(st.binary(min_size=8, max_size=8), st.one_of(st.none(), st.integers(0, 0xFFFF)))
@_settings
def test_parse_handshake_any_8_bytes(data: bytes, expected: int | None) -> None:
    try:
        proto = parse_handshake(data, expected)
    except gsp.HandshakeError:
        return
    assert handshake(proto) == data
    assert expected is None or proto == expected


def test_the_start_of_a_header_is_checked_as_far_as_it_came() -> None:
    # What a listener reads at accept may be part of a header: it passes while it could still
    # be one, and is refused at the first byte that cannot (the same errors as a whole header).
    hs = handshake(0x50)
    for n in range(1, wire.HANDSHAKE_SIZE + 1):
        wire.check_handshake_start(hs[:n])
        wire.check_handshake_start(bytearray(hs[:n]))
    refused = [(b"G", gsp.BadMagic), (b"\x00Q", gsp.BadMagic), (b"\x16\x03\x01", gsp.BadMagic),
               (b"\x00SP\x01", gsp.BadVersion), (b"\x00SP\x00\x00\x50\x01", gsp.BadReserved),
               (b"\x00SP\x00\x00\x50\x00\x01", gsp.BadReserved)]
    for data, error in refused:
        with pytest.raises(error):
            wire.check_handshake_start(data)
