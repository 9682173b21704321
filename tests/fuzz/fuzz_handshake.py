"""Fuzz target: the SP handshake parser (gsp.transport.wire.parse_handshake) and a whole stream connection
as a listener sees it (gsp.transport.stream.StreamConnection: handshake, then frames until the peer stops).

Input layout: byte 0 picks the local protocol (an index into the registered protocols), its
bit 7 the framing (tcp/ipc); byte 1 seeds how the stream is cut into chunks; the rest is what the
peer sends, its first 8 bytes being its handshake.

A finding is: ``parse_handshake`` returning for a header that is not exactly
``handshake(number)``, or raising anything but ``BadMagic``/``BadVersion``/``BadReserved``/
``WrongProtocol`` (``ValueError`` for a wrong length); the connection raising anything but a
:class:`gsp.GspError` (``ConnectionBroken`` at the end of the bytes, a handshake or frame error
before), taking a handshake ``parse_handshake`` refuses, or sending anything but its own
handshake. A hang is caught by libFuzzer's ``-timeout``.
"""

from __future__ import annotations

import atheris
import harness

with atheris.instrument_imports(include=list(harness.INSTRUMENTED)):
    import gsp
    from gsp.transport import StreamConnection, wire

SPECS = [gsp.registry.protocol(name) for name in sorted(gsp.registry.protocols)]
HEADER_ERRORS = (gsp.BadMagic, gsp.BadVersion, gsp.BadReserved, gsp.WrongProtocol)


def check_parser(header: bytes, spec: "gsp.protocol.ProtocolSpec") -> bool:
    """parse_handshake on its own; True if the header is a good one for ``spec``."""
    for expected in (None, spec.peer_number):
        try:
            number = wire.parse_handshake(header, expected, own=spec.number)
        except HEADER_ERRORS as exc:
            harness.expect(len(header) == wire.HANDSHAKE_SIZE, f"{exc!r} for a short header")
            harness.expect(str(exc) != "", "an error without a message")
            if isinstance(exc, gsp.WrongProtocol):
                harness.expect(expected is not None, "WrongProtocol with no protocol expected")
            ok = False
        except ValueError:
            harness.expect(len(header) != wire.HANDSHAKE_SIZE, "ValueError for 8 bytes")
            ok = False
        else:
            harness.expect(wire.handshake(number) == header,
                           f"accepted {header.hex()} as protocol 0x{number:x}")
            ok = True
    return ok


def one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    spec = SPECS[(data[0] & 0x7F) % len(SPECS)]
    framing = wire.IPC if data[0] & 0x80 else wire.TCP
    stream = data[2:]
    good = check_parser(stream[:wire.HANDSHAKE_SIZE], spec) if len(stream) >= 8 else False
    sock = harness.FakeSocket(harness.chunks(stream, data[1]))
    conn = StreamConnection(sock, framing, 4096, "tcp://127.0.0.1:5555", "tcp://127.0.0.1:40000")
    shook = False
    try:
        conn.handshake(spec, None)
        shook = True
        for _ in range(len(stream) + 1):  # each call consumes at least one byte or ends
            for msg in conn.recv_messages():
                harness.expect(len(msg) <= 4096, f"a {len(msg)}-byte message over the limit")
        raise harness.Finding("recv_messages did not end at the end of the bytes")
    except gsp.GspError as exc:
        if shook:
            harness.expect(good, f"handshake {stream[:8].hex()} accepted, parse_handshake refuses")
        elif len(stream) >= wire.HANDSHAKE_SIZE:
            harness.expect(not good, f"handshake {stream[:8].hex()} refused: {exc!r}")
    finally:
        conn.close()
    harness.expect(bytes(sock.sent) == wire.handshake(spec.number),
                   f"the connection sent {bytes(sock.sent)[:16].hex()}")


if __name__ == "__main__":
    harness.main(one_input)
