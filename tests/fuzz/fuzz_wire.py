"""Fuzz target: gsp.transport.wire.FrameDecoder, the SP stream framing (tcp and ipc) read off the network.

Input layout: byte 0 chooses the framing (bit 0: tcp/ipc), the size limit (bits 1-3, an index
into ``LIMITS``) and whether a body is fed whole, as a buffer, when ``body_wanted`` says the
decoder waits for exactly it, as the stream transports read it (bit 4); byte 1 seeds how the stream is cut into chunks; the rest is
the stream itself.

A finding is: any exception other than the typed errors the decoder documents (``BadFrame``,
``MessageTooLarge``), messages that differ from those a straightforward reference parse of the
whole stream gives (for every split), an error where the reference sees none or none where it
sees one, an error that is not kept in ``error`` and raised again, or ``buffered`` counting more
bytes than were fed. A hang is caught by libFuzzer's ``-timeout``.
"""

from __future__ import annotations

import struct

import atheris
import harness

with atheris.instrument_imports(include=list(harness.INSTRUMENTED)):
    import gsp
    from gsp.transport import wire

LIMITS = (0, 1, 8, 255, 256, 1024, 40_000, 1 << 20)
EXPECTED = (gsp.BadFrame, gsp.MessageTooLarge)


def reference(framing: wire.Framing, max_size: int, stream: bytes) -> tuple[list[bytes], type | None]:
    """Messages and error class of ``stream`` parsed in one piece, the simplest possible way."""
    out: list[bytes] = []
    pos, psize = 0, framing.prefix_size
    while len(stream) - pos >= psize:
        if framing.type_byte is None:
            (n,) = struct.unpack_from(">Q", stream, pos)
        else:
            kind, n = struct.unpack_from(">BQ", stream, pos)
            if kind != framing.type_byte:
                return out, gsp.BadFrame
        if max_size and n > max_size:
            return out, gsp.MessageTooLarge
        if len(stream) - pos - psize < n:
            break
        out.append(stream[pos + psize:pos + psize + n])
        pos += psize + n
    return out, None


def one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    conf, seed, stream = data[0], data[1], data[2:]
    framing = wire.IPC if conf & 1 else wire.TCP
    max_size = LIMITS[(conf >> 1) & 7]
    in_place = bool(conf & 16)
    dec = wire.FrameDecoder(framing, max_size)
    got: list[bytes] = []
    error: Exception | None = None
    fed = 0
    for piece in harness.chunks(stream, seed):
        try:
            while piece:
                want = dec.body_wanted if in_place else 0
                if want:  # as a stream reader does: exactly the body, when it has it all
                    n = min(want, len(piece))
                    got += dec.feed(bytearray(piece[:n]))  # (a buffer, not bytes: the copy path)
                else:
                    n = len(piece)
                    got += dec.feed(piece)
                fed += n
                piece = piece[n:]
                harness.expect(dec.buffered <= fed, f"buffered {dec.buffered} > {fed} bytes fed")
                if dec.error is not None:
                    raise dec.error
        except EXPECTED as exc:
            error = exc
            break
    want, want_error = reference(framing, max_size, stream)
    harness.expect(got == want, f"messages {got[:3]!r}... differ from the reference {want[:3]!r}")
    harness.expect(type(error) is want_error if want_error else error is None,
                   f"error {error!r}, the reference says {want_error}")
    if error is not None:
        try:
            dec.feed(b"x")
        except EXPECTED as again:
            harness.expect(type(again) is type(error), f"{again!r} after {error!r}")
        else:
            raise harness.Finding(f"a dead decoder took more bytes after {error!r}")


if __name__ == "__main__":
    harness.main(one_input)
