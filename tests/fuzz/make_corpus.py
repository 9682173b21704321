"""Write the seed corpus of every fuzz target into tests/fuzz/corpus/<target>/ (small files,
committed): valid and slightly wrong inputs in each target's input layout, so fuzzing starts
from inputs that reach deep into the code instead of being refused at the first byte.

Run from the repository root: ``python tests/fuzz/make_corpus.py`` (it replaces the files it
wrote before and leaves others alone). See the "Fuzzing" section of docs/reliability.md.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import os
import pathlib
import struct

import msgpack

HERE = pathlib.Path(__file__).parent
CORPUS = HERE / "corpus"
PROTOCOLS = {"bus": (0x70, 0x70), "pair": (0x10, 0x10), "pair1": (0x11, 0x11),
             "pub": (0x20, 0x21), "pull": (0x51, 0x50), "push": (0x50, 0x51),
             "rep": (0x31, 0x30), "req": (0x30, 0x31), "respondent": (0x63, 0x62),
             "sub": (0x21, 0x20), "surveyor": (0x62, 0x63)}  # name: (own number, peer number)
WS_PEERS = {"pull": "push", "push": "pull", "pair": "pair", "rep": "req", "req": "rep",
            "sub": "pub", "pub": "sub", "bus": "bus"}  # fuzz_ws.PROTOCOLS order below
WS_ORDER = ("pull", "push", "pair", "rep", "req", "sub", "pub", "bus")
NONCE = b"dGhlIHNhbXBsZSBub25jZQ=="  # fuzz_ws fixes the dialer's nonce to this


def hs(number: int) -> bytes:
    return b"\x00SP\x00" + number.to_bytes(2, "big") + b"\x00\x00"


def tcp(*bodies: bytes) -> bytes:
    return b"".join(struct.pack(">Q", len(b)) + b for b in bodies)


def ipc(*bodies: bytes, kind: int = 1) -> bytes:
    return b"".join(struct.pack(">BQ", kind, len(b)) + b for b in bodies)


# -- fuzz_wire: conf byte (bit 0 ipc, bits 1-3 limit index, bit 4 in place), seed, stream -----
def wire_seeds() -> dict[str, bytes]:
    seeds = {}
    limit = {0: 0, 1024: 5, 40_000: 6, 1 << 20: 7, 8: 2}
    for name, framed, bit in (("tcp", tcp, 0), ("ipc", ipc, 1)):
        for lim in (0, 1024):
            conf = bit | limit[lim] << 1
            seeds[f"{name}-small-lim{lim}"] = bytes([conf, 7]) + framed(b"", b"a", b"hello", b"x" * 300)
            seeds[f"{name}-run-lim{lim}"] = bytes([conf, 0]) + framed(*[b"rec%05d" % i for i in range(12)])
            seeds[f"{name}-header-lim{lim}"] = bytes([conf, 3]) + framed(b"\x80\x00\x00\x01req")
        seeds[f"{name}-too-big"] = bytes([bit | limit[8] << 1, 5]) + framed(b"123456789")
        seeds[f"{name}-in-place-partial"] = (bytes([bit | 16 | limit[40_000] << 1, 9])
                                             + framed(b"q")[:-1] + framed(b"")[:-1][:0]
                                             + (struct.pack(">Q", 33_000) if not bit
                                                else struct.pack(">BQ", 1, 33_000)) + b"z" * 200)
    seeds["ipc-bad-type"] = bytes([1, 2]) + ipc(b"ok") + ipc(b"bad", kind=2)
    seeds["tcp-huge-announce"] = bytes([0, 1]) + b"\xff" * 8 + b"tail"
    return seeds


# -- fuzz_handshake: byte 0 protocol index (bit 7 ipc), seed, peer handshake + frames --------
def handshake_seeds() -> dict[str, bytes]:
    seeds = {}
    names = sorted(PROTOCOLS)
    for i, name in enumerate(names):
        own, peer = PROTOCOLS[name]
        seeds[f"{name}-tcp"] = bytes([i, 3]) + hs(peer) + tcp(b"one", b"", b"two" * 20)
        seeds[f"{name}-ipc"] = bytes([i | 0x80, 5]) + hs(peer) + ipc(b"one", b"two")
        seeds[f"{name}-wrong-peer"] = bytes([i, 0]) + hs(own ^ 0x01 if own != peer else 0x99)
    seeds["bad-magic"] = bytes([0, 0]) + b"\x00SQ\x00\x00\x70\x00\x00"
    seeds["bad-version"] = bytes([0, 0]) + b"\x00SP\x01\x00\x70\x00\x00"
    seeds["bad-reserved"] = bytes([0, 0]) + b"\x00SP\x00\x00\x70\x00\x01"
    seeds["short"] = bytes([0, 1]) + b"\x00SP\x00\x00"
    seeds["too-big-frame"] = bytes([0, 2]) + hs(0x70) + struct.pack(">Q", 5000) + b"x" * 10
    return seeds


# -- fuzz_ws: flags (bit 0 dialer, 1 text ok, 2 small limits, 3 origins, 4 close, 5-7 proto) --
def masked(opcode: int, payload: bytes, fin: bool = True, key: bytes = b"\x01\x02\x03\x04") -> bytes:
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    size = bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big")
    return head + size + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def plain(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    n = len(payload)
    size = bytes([n]) if n < 126 else bytes([126]) + n.to_bytes(2, "big")
    return bytes([(0x80 if fin else 0) | opcode]) + size + payload


def request(sub: str, path: str = "/sp", extra: str = "", version: str = "13") -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:5555\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {NONCE.decode()}\r\n"
            f"Sec-WebSocket-Version: {version}\r\nSec-WebSocket-Protocol: {sub}.sp.nanomsg.org\r\n"
            f"{extra}\r\n").encode()


def response(sub: str) -> bytes:
    accept = base64.b64encode(hashlib.sha1(
        NONCE + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest()).decode()
    return (f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: {sub}.sp.nanomsg.org\r\n"
            "\r\n").encode()


def ws_seeds() -> dict[str, bytes]:
    seeds = {}
    for i, name in enumerate(WS_ORDER):
        p = i << 5
        frames = masked(2, b"\x80\x00\x00\x01hello") + masked(9, b"ping") + masked(2, b"x" * 130)
        seeds[f"server-{name}"] = bytes([p, 0]) + request(name) + frames + masked(8, b"\x03\xe8")
        srv_frames = plain(2, b"\x80\x00\x00\x01world") + plain(9, b"") + plain(8, b"\x03\xe8bye")
        seeds[f"client-{name}"] = bytes([p | 1, 0]) + response(WS_PEERS[name]) + srv_frames
    seeds["server-fragments-text-close"] = (bytes([0 | 2 | 16, 11]) + request("pull")
                                            + masked(2, b"abc", fin=False) + masked(9, b"p")
                                            + masked(0, b"def") + masked(1, b"text")
                                            + masked(9, b"after close") + masked(8, b"\x03\xe8"))
    seeds["server-small-limits"] = bytes([4, 1]) + request("pull") + masked(2, b"y" * 100)
    seeds["server-origin"] = bytes([8, 0]) + request("pull", extra="Origin: http://evil\r\n")
    seeds["server-wrong-sub"] = bytes([0, 0]) + request("rep")
    seeds["server-wrong-path"] = bytes([0, 0]) + request("pull", path="/nope?x=1")
    seeds["server-old-version"] = bytes([0, 0]) + request("pull", version="8")
    seeds["server-not-upgrade"] = bytes([0, 2]) + b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"
    seeds["server-unmasked"] = bytes([0, 0]) + request("pull") + plain(2, b"unmasked")
    seeds["client-refused"] = (bytes([1, 0]) + b"HTTP/1.1 403 Forbidden\r\nContent-Length: 5\r\n"
                               b"\r\nnope!")
    seeds["client-wrong-sub"] = bytes([1, 0]) + response("bus") + plain(2, b"m")
    seeds["client-bad-accept"] = bytes([1, 0]) + response("push").replace(b"s3pP", b"AAAA")
    return seeds


# -- fuzz_spark_rows: byte 0 schema (bits 0-2), bit 3 skip; bodies with a u16 length each -----
def bodies(*items: bytes) -> bytes:
    return b"".join(len(b).to_bytes(2, "big") + b for b in items)


def spark_seeds() -> dict[str, bytes]:
    pk = msgpack.Packer(datetime=True)
    utc = datetime.timezone.utc
    key = ["w", 1, 0, 0]
    rows = {
        0: [{"a": 1, "b": "x"}, {"a": -(1 << 63), "b": None}, {"a": (1 << 64) - 1, "b": 5}],
        1: [{"x": 1.5, "ok": True, "n": 7}, {"x": "nan", "ok": 1, "n": 1 << 40}],
        2: [{"ts": datetime.datetime(2024, 1, 2, tzinfo=utc), "d": "2024-01-02",
             "amount": "12.34", "ntz": "2024-01-02T03:04:05"},
            {"ts": 1.7e9, "d": "not a date", "amount": "1e99", "ntz": 1e30}],
        3: [{"tags": ["a", "b"], "attrs": {"k": 1}, "raw": b"\x00\x01", "small": 127},
            {"tags": "notalist", "attrs": [1, 2], "raw": "str", "small": 300}],
        4: [{"p": {"x": 1, "y": [1.0, 2.5]}, "f": 0.5, "s": 3},
            {"p": [1, 2], "f": "x", "s": -40000}],
        5: [b"raw bytes", b""],
        6: [b"text \xff\xfe", b"more"],
        7: [{"value": b"v", "n": 1, "_gsp_key": key}, {"value": "s", "n": "1"}],
    }
    seeds = {}
    for schema, items in rows.items():
        packed = [r if isinstance(r, bytes) else pk.pack(r) for r in items]
        for skip in (0, 8):
            seeds[f"schema{schema}-{'skip' if skip else 'fail'}"] = bytes([schema | skip]) + bodies(*packed)
    seeds["not-msgpack"] = bytes([0]) + bodies(b"\xc1", pk.pack([1, 2]), pk.pack({"a": 1}))
    seeds["batch-of-maps"] = bytes([8]) + bodies(pk.pack([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]))
    return seeds


# -- fuzz_options: byte 0 surface (mod 3), byte 1 protocol index, then text lines -------------
def options_seeds() -> dict[str, bytes]:
    opt = {
        "socket": "recv_timeout=f:1.5\nsend_timeout=n:\nrecv_max_size=i:1024\nlinger=t:0.5\n"
                  "reconnect_time=f:0.1\nmax_reconnect_time=i:10\nsend_buffer=i:16\n"
                  "recv_buffer=i:16\nbest_effort=b:1\nhandshake_timeout=i:5",
        "bad": "recv_timeout=i:5000\nrecv_max_size=i:-1\nlinger=s:1\nbest_effort=i:1\n"
               "reconnect_time=f:0\nnope=i:1",
        "ws": "ws_request_headers=d:X-A=1;X-B=2\nws_response_headers=p:X-C=3\n"
              "ws_origins=l:http://a,http://b\nws_recv_text=b:0\nws_recv_frame_max=i:0\n"
              "ws_max_send_frame_size=i:65536",
        "ws-bad": "ws_request_headers=d:Bad:Name=1\nws_origins=s:http://a\n"
                  "ws_response_headers=p:X=a\r\nb",
        "tls": "tls_verify=b:1\ntls_server_name=s:example.org\ntls_ca_file=n:",
        "protocol": "ttl=i:8\nsurvey_time=f:0.5\nresend_time=f:1\nsubscribe=x:00",
        "nan": "recv_timeout=f:nan\nlinger=f:inf\nreconnect_time=t:-1",
    }
    urls = ["tcp://127.0.0.1:5555", "tcp://[::1]:0", "tcp://*:5555", "tcp://*", "ipc:///tmp/x.sock",
            "inproc://name", "ws://host:80/path?q", "wss://[::1]/sp", "tls+tcp://a:1", "tcp://:5",
            "tcp://u:p@h:1", "nope://x", "tcp://h:99999", "tcp://*:-1", "ws://[::1", "tcp:/x"]
    spark = {
        "source": "url=tcp://127.0.0.1:5555\nprotocol=sub\nmode=dial\nsubscribe=[\"a\",\"b\"]\n"
                  "format=msgpack\npartitions=4\nmax_batch_rows=10\nrecv_max_size=0\n"
                  "on_bad_message=skip",
        "sink": "url=tcp://127.0.0.1:1,ipc:///tmp/s\nprotocol=req\nmode=listen\nformat=raw\n"
                "batch_rows=1\nwindow=8\nresend_time=0.5\nack_timeout=inf\nconnect_timeout=nan",
        "bad": "url=\nprotocol=PUSH\npartitions=0\nsubscribe=[1]\nextra=1",
    }
    seeds = {f"options-{k}": bytes([0, i]) + v.encode() for i, (k, v) in enumerate(opt.items())}
    seeds["urls"] = bytes([1, 0]) + "\n".join(urls).encode()
    seeds.update({f"spark-{k}": bytes([2, 0]) + v.encode() for k, v in spark.items()})
    return seeds


TARGETS = {"wire": wire_seeds, "handshake": handshake_seeds, "ws": ws_seeds,
           "spark_rows": spark_seeds, "options": options_seeds}


def main() -> None:
    for target, make in TARGETS.items():
        out = CORPUS / target
        out.mkdir(parents=True, exist_ok=True)
        for name, data in sorted(make().items()):
            (out / name).write_bytes(data)
        print(f"{target}: {len(os.listdir(out))} seeds in {out}")


if __name__ == "__main__":
    main()
