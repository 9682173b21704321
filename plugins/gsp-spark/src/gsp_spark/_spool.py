"""The source's on-disk spool: every received message, numbered, until Spark commits past it.

Messages get consecutive sequence numbers (the stream offsets Spark checkpoints) and are appended
to segment files named by their first number, ``<first:020d>.gsps``. A record is a 16-byte header
(body length u32, pipe id u32, receive time f64, little-endian) and the body. Only the receiver
thread appends, and only to the newest segment; Spark's threads read and drop older data. So a
micro-batch replayed after a restart reads back exactly the messages it read the first time.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading
from array import array
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

import gsp

log = logging.getLogger("gsp.spark")

REC = struct.Struct("<IId")
SUFFIX = ".gsps"


class SpoolBusy(gsp.GspError):
    """Another live process owns this spool directory."""


@dataclass
class _Seg:
    first: int
    count: int
    size: int
    path: str
    #: where each record starts in the file (readers take the first ``count``)
    offs: array = field(default_factory=lambda: array("q"))  # type: ignore[type-arg]


#: A record's header as a numpy record: :data:`REC`'s fields, little-endian, no padding.
HEADER = np.dtype([("size", "<u4"), ("pipe", "<u4"), ("received", "<f8")])


def shifted(offs: Any, delta: int) -> array:  # type: ignore[type-arg]
    """``offs`` (``int64``: an ``array('q')``, a numpy array) each minus ``delta``, as an
    ``array('q')`` (one numpy operation)."""
    out = array("q")
    out.frombytes((np.frombuffer(offs, np.int64) - delta).tobytes())
    return out


def pack_records(bodies: Sequence[bytes], pipes: Sequence[int] | None, received: float,
                 base: int = 0) -> tuple[bytes, array]:  # type: ignore[type-arg]
    """The spool records of ``bodies`` back to back, and where each starts, counted from
    ``base``, plus where the last one ends: ``len(bodies) + 1`` offsets. The headers are one
    numpy record array, the bodies one join; numpy puts each in its place (no Python call per
    message but ``len``)."""
    n = len(bodies)
    lens = np.fromiter(map(len, bodies), np.int64, n)
    heads = np.empty(n, HEADER)
    heads["size"] = lens
    heads["pipe"] = 0 if pipes is None else np.fromiter(pipes, np.uint32, n)
    heads["received"] = received
    ends = np.empty(n + 1, np.int64)
    ends[0] = 0
    np.cumsum(lens + REC.size, out=ends[1:])
    bodies_at = np.frombuffer(b"".join(bodies), np.uint8)
    head_bytes = heads.view(np.uint8).reshape(n, REC.size)
    out: Any
    if n and lens.min() == lens.max():  # all of one size: a table of rows, header then body
        out = np.empty((n, REC.size + int(lens[0])), np.uint8)
        out[:, :REC.size] = head_bytes
        out[:, REC.size:] = bodies_at.reshape(n, -1)
    else:
        out = np.empty(int(ends[-1]), np.uint8)
        head_at = ends[:-1, None] + np.arange(REC.size)
        is_body = np.ones(len(out), bool)
        is_body[head_at] = False
        out[head_at] = head_bytes
        out[is_body] = bodies_at
    return out.tobytes(), shifted(ends, -base)


def scan(data: bytes | memoryview, limit: int | None = None) -> tuple[list[int], int]:
    """Start offsets of the complete records in ``data`` (at most ``limit``), and where the last
    complete one ends (a torn tail after that is ignored)."""
    offs: list[int] = []
    pos, end, hsize = 0, len(data), REC.size
    unpack = REC.unpack_from
    while pos + hsize <= end and (limit is None or len(offs) < limit):
        n = unpack(data, pos)[0]
        if pos + hsize + n > end:
            break
        offs.append(pos)
        pos += hsize + n
    return offs, pos


class Spool:
    def __init__(self, path: str, segment_bytes: int = 8 << 20) -> None:
        self.path = path
        self.segment_bytes = segment_bytes
        self._segs: list[_Seg] = []
        self._fd = -1
        self._lock = threading.Lock()
        self._lockfile: int = -1

    # -- life cycle (receiver thread) -------------------------------------------------------------
    def open(self) -> None:
        os.makedirs(self.path, exist_ok=True)
        fd = os.open(os.path.join(self.path, "LOCK"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            raise SpoolBusy(f"gsp source: spool {self.path} is in use by process {owner or '?'}; "
                            "give each query its own 'spool' option") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lockfile = fd
        firsts = sorted(int(n[:-len(SUFFIX)]) for n in os.listdir(self.path)
                        if n.endswith(SUFFIX) and n[:-len(SUFFIX)].isdigit())
        for first in firsts:
            p = self._seg_path(first)
            with open(p, "rb") as f:
                data = f.read()
            offs, good = scan(data)
            if good < len(data):  # torn by a crash mid-write: those bytes were never acked
                log.warning("gsp spool %s: dropping a torn record tail of %d bytes", p,
                            len(data) - good)
                os.truncate(p, good)
            self._segs.append(_Seg(first, len(offs), good, p, array("q", offs)))
        for a, b in zip(self._segs, self._segs[1:]):
            if a.first + a.count != b.first:
                log.warning("gsp spool %s: messages %d..%d are missing", self.path,
                            a.first + a.count, b.first - 1)
        if not self._segs:
            self._new_segment(0)
        else:
            self._fd = os.open(self._segs[-1].path, os.O_WRONLY | os.O_APPEND)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._lockfile >= 0:
            os.close(self._lockfile)  # releases the flock
            self._lockfile = -1

    def _seg_path(self, first: int) -> str:
        return os.path.join(self.path, f"{first:020d}{SUFFIX}")

    def _new_segment(self, first: int) -> None:
        p = self._seg_path(first)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = fd
        self._segs.append(_Seg(first, 0, 0, p))
        _fsync_dir(self.path)

    # -- positions (any thread) -------------------------------------------------------------------
    @property
    def next_seq(self) -> int:
        s = self._segs[-1]
        return s.first + s.count

    @property
    def first_seq(self) -> int:
        return self._segs[0].first

    # -- writing (receiver thread) ----------------------------------------------------------------
    def append(self, bodies: Sequence[bytes], pipes: Sequence[int] | None,
               received: float) -> None:
        """Append messages in order (one ``write``); they are readable when this returns.
        ``pipes``: each one's pipe id, or None for 0 throughout."""
        with self._lock:
            seg = self._segs[-1]
            recs, starts = pack_records(bodies, pipes, received, seg.size)
            view = memoryview(recs)
            while view:
                view = view[os.write(self._fd, view):]
            seg.size = starts.pop()
            seg.offs.extend(starts)
            seg.count += len(bodies)
            if seg.size >= self.segment_bytes:
                self._new_segment(seg.first + seg.count)

    def sync(self) -> None:
        """fsync what was appended (the acknowledged protocol calls this before replying)."""
        with self._lock:
            os.fsync(self._fd)

    def skip_to(self, seq: int) -> bool:
        """Continue numbering at ``seq`` if Spark's checkpoint is ahead (the spool was lost)."""
        with self._lock:
            if seq <= self.next_seq:
                return False
            log.warning("gsp spool %s: checkpoint is at %d, spool only at %d (spool lost?)",
                        self.path, seq, self.next_seq)
            self._new_segment(seq)
            return True

    # -- reading and dropping (Spark's threads) -------------------------------------------------
    def read(self, lo: int, hi: int) -> tuple[bytes, array, int]:  # type: ignore[type-arg]
        """Records ``lo..hi-1`` as one buffer, where each record starts in it, and the sequence
        number of the first one (above ``lo`` only if the spool lost the start)."""
        with self._lock:
            segs = [_Seg(s.first, s.count, s.size, s.path, s.offs) for s in self._segs
                    if s.first < hi and s.first + s.count > lo]
        chunks: list[bytes] = []
        offsets = array("q")
        base = 0
        first_seq = -1
        for s in segs:
            a, b = max(lo, s.first) - s.first, min(hi, s.first + s.count) - s.first
            if a >= b:
                continue
            if first_seq < 0:
                first_seq = s.first + a
            start = s.offs[a]
            stop = s.offs[b] if b < s.count else s.size
            with open(s.path, "rb") as f:
                f.seek(start)
                data = f.read(stop - start)
            offsets.extend(shifted(s.offs[a:b], start - base))
            chunks.append(data)
            base += len(data)
        if first_seq > lo or (first_seq < 0 and hi > lo):
            log.warning("gsp spool %s: messages from %d were requested but are gone", self.path, lo)
        return b"".join(chunks), offsets, max(first_seq, lo)

    def drop_below(self, seq: int) -> None:
        """Delete segments whose messages are all below ``seq`` (never the one being written)."""
        with self._lock:
            n = 0
            while n < len(self._segs) - 1 and self._segs[n].first + self._segs[n].count <= seq:
                n += 1
            dead, self._segs = self._segs[:n], self._segs[n:]
        for s in dead:
            try:
                os.unlink(s.path)
            except FileNotFoundError:
                pass


def _fsync_dir(path: str) -> None:
    # A new segment's name must survive a crash too, or its acknowledged records would be lost.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
