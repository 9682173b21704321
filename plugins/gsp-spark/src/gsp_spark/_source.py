"""The streaming source: a gsp receiver spooling to disk, read by Spark in micro-batches.

Where each piece runs (facts of PySpark's Python data sources):

* The reader's offset methods run in one long-lived Python process beside the driver, which sits
  blocked on its JVM socket between calls. A greenlet there would starve, so the gsp socket lives
  in an OS thread with a gevent hub of its own (:class:`_Receiver`), started by the first offset
  call — never in ``__init__``, because Spark also builds readers elsewhere and pickles them.
* ``partitions()`` cuts a batch's records out of the spool into picklable chunks; ``read()`` runs
  in executor processes and only decodes those bytes into Arrow.
* Offsets are ``{"seq": n}``: ``n`` messages spooled so far. The spool outlives the process, so a
  restarted query re-reads an uncommitted batch byte for byte; ``commit(end)`` frees the spool.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import logging
import threading
import time
import weakref
from typing import Any, Iterator

import gevent
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StringType, StructType

import gsp

from ._config import SourceConfig
from ._spool import REC, Spool
from ._types import META, check_source_schema
from ._wire import unpack

try:  # pyspark >= 4.2: read limits and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - pyspark 4.1
    ReadMaxRows = None  # type: ignore[assignment,misc]
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]

log = logging.getLogger("gsp.spark")

_DRAIN = 8192  # most messages spooled (and, with rep, fsynced and acknowledged) as one group
_POLL = 0.1  # seconds the receiver waits per recv before looking at its stop flag
_REBIND = 20.0  # seconds a listener retries an address its predecessor process still holds


class SourceError(gsp.GspError):
    """The source's receiver failed, or a message does not fit the declared schema."""


class _Receiver(threading.Thread):
    """Owns the gsp socket: receives, spools in groups, and (rep) acknowledges after fsync."""

    def __init__(self, cfg: SourceConfig, spool: Spool) -> None:
        super().__init__(name="gsp-spark-receiver", daemon=True)
        self.cfg = cfg
        self.spool = spool
        self.durable = spool.next_seq  # first sequence number Spark may not read yet
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self._stopping = False

    def run(self) -> None:
        hub = gevent.get_hub()  # this thread's own hub: the process's main thread blocks on the JVM
        sock = None
        try:
            sock = self._open()
            self.ready.set()
            self._loop(sock)
        except BaseException as exc:  # surfaced to Spark by the next offset call
            self.error = exc
            if self.ready.is_set():
                log.exception("gsp source receiver stopped")
        finally:
            self.ready.set()
            if sock is not None:
                sock.close()
            hub.destroy(destroy_loop=True)

    def _open(self) -> gsp.Socket:
        cfg = self.cfg
        # Raw rep: each request's routing header comes with it, so a whole group can be answered
        # after one fsync instead of one request at a time.
        sock = gsp.socket(cfg.protocol, raw=cfg.protocol == "rep", recv_timeout=_POLL,
                          send_timeout=5.0, recv_buffer=_DRAIN, recv_max_size=cfg.recv_max_size)
        try:
            if cfg.protocol == "sub":
                for prefix in cfg.subscribe:
                    sock.subscribe(prefix)
            for url in cfg.urls:
                if cfg.mode == "dial":
                    sock.dial(url)  # keeps redialing in the background until the peer is up
                    continue
                deadline = time.monotonic() + _REBIND
                while True:
                    try:
                        sock.listen(url)
                        break
                    except gsp.AddressInUse:
                        if time.monotonic() > deadline:
                            raise
                        gevent.sleep(0.2)
        except BaseException:
            sock.close()
            raise
        return sock

    def _loop(self, sock: gsp.Socket) -> None:
        ack = self.cfg.protocol == "rep"
        spool = self.spool
        while not self._stopping:
            try:
                msgs = [sock.recv_msg()]
            except gsp.Timeout:
                continue
            sock.recv_timeout = 0  # take what is already queued without waiting
            try:
                while len(msgs) < _DRAIN:
                    msgs.append(sock.recv_msg())
            except gsp.Timeout:
                pass
            finally:
                sock.recv_timeout = _POLL
            spool.append([m.body for m in msgs], [m.pipe.id if m.pipe else 0 for m in msgs],
                         time.time())
            if ack:
                spool.sync()  # durable first: only then may the producer forget the message
                for m in msgs:
                    try:
                        sock.send_msg(gsp.Message(b"", m.header))
                    except gsp.Timeout:
                        pass  # the requester resends; the copy is a duplicate, not a loss
            self.durable = spool.next_seq

    def stop(self) -> None:
        self._stopping = True
        self.join(timeout=5)


def _release(rx: _Receiver, spool: Spool) -> None:
    """Stop the receiver (closing its socket) and close the spool (freeing its lock)."""
    rx.stop()
    spool.close()


class _Chunk(InputPartition):
    """Spooled records ``first_seq..`` for one Spark task: plain bytes, safe to pickle."""

    def __init__(self, first_seq: int, data: bytes) -> None:
        self.first_seq = first_seq
        self.data = data

    def __repr__(self) -> str:
        return f"_Chunk(first_seq={self.first_seq}, bytes={len(self.data)})"


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, cfg: SourceConfig, schema: StructType) -> None:
        self.cfg = cfg
        self.schema = schema
        self.raw = check_source_schema(schema, cfg.format)
        self._receiver: _Receiver | None = None
        self._spool: Spool | None = None
        self._until: int | None = None  # Trigger.AvailableNow target
        self._release: weakref.finalize[[_Receiver, Spool], StreamReader] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get a copy: configuration only, never the thread, socket or spool handle.
        return {"cfg": self.cfg, "schema": self.schema, "raw": self.raw,
                "_receiver": None, "_spool": None, "_until": None, "_release": None}

    # -- driver side: the long-lived planner process ------------------------------------------
    def _start(self) -> _Receiver:
        rx = self._receiver
        if rx is None:
            spool = Spool(self.cfg.spool)
            spool.open()
            rx = _Receiver(self.cfg, spool)
            rx.start()
            rx.ready.wait()
            if rx.error is not None:  # could not listen/dial: free the spool for a retry
                spool.close()
                raise SourceError(f"gsp source: cannot open {', '.join(self.cfg.urls)}: "
                                  f"{rx.error!r}") from rx.error
            self._spool, self._receiver = spool, rx
            # Spark does not always call stop(): whenever this reader is collected, or the
            # process exits, the receiver and the spool are released anyway.
            self._release = weakref.finalize(self, _release, rx, spool)
        if rx.error is not None:
            raise SourceError(f"gsp source receiver failed: {rx.error!r}") from rx.error
        return rx

    def initialOffset(self) -> dict[str, int]:
        self._start()
        assert self._spool is not None
        return {"seq": self._spool.first_seq}

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(self.cfg.max_batch_rows) if ReadMaxRows is not None else None

    def latestOffset(self, start: dict[str, int] | None = None,
                     limit: Any = None) -> dict[str, int]:
        rx = self._start()
        assert self._spool is not None
        if start is not None:
            if self._spool.skip_to(start["seq"]):
                rx.durable = max(rx.durable, start["seq"])
        end = rx.durable if self._until is None else min(rx.durable, self._until)
        if start is not None and ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            end = min(end, start["seq"] + limit.max_rows)
        return {"seq": max(end, start["seq"]) if start is not None else end}

    def prepareForTriggerAvailableNow(self) -> None:
        self._until = self._start().durable

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        self._start()
        assert self._spool is not None
        lo, hi = start["seq"], end["seq"]
        if hi <= lo:
            return []
        data, offs, first = self._spool.read(lo, hi)
        n = len(offs)
        parts = max(1, min(self.cfg.partitions, n // 1024 or 1))
        out: list[InputPartition] = []
        for i in range(parts):
            a, b = i * n // parts, (i + 1) * n // parts
            if a < b:
                stop = offs[b] if b < n else len(data)
                out.append(_Chunk(first + a, data[offs[a]:stop]))
        return out

    def commit(self, end: dict[str, int]) -> None:
        if self._spool is not None:
            self._spool.drop_below(end["seq"])

    def stop(self) -> None:
        if self._release is not None:
            self._release()  # runs _release once, whoever comes first
        self._release = self._receiver = self._spool = None

    # -- executor side ----------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, _Chunk)
        yield decode_chunk(partition, self.schema, self.raw, self.cfg.on_bad_message)


def decode_chunk(chunk: _Chunk, schema: StructType, raw: bool, on_bad: str) -> Any:
    """One Arrow record batch of ``schema`` from a chunk of spooled records."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow = to_arrow_schema(schema, timezone="UTC")  # exactly what Spark checks batches against
    data = chunk.data
    bodies: list[bytes] = []
    pipes: list[int] = []
    times: list[float] = []
    pos, end, hsize, unpack_rec = 0, len(data), REC.size, REC.unpack_from
    while pos < end:
        n, pipe, t = unpack_rec(data, pos)
        pos += hsize
        bodies.append(data[pos:pos + n])
        pipes.append(pipe)
        times.append(t)
        pos += n
    seqs = list(range(chunk.first_seq, chunk.first_seq + len(bodies)))
    meta: dict[str, list[Any]] = {"_received": [int(t * 1e6) for t in times], "_pipe": pipes,
                                  "_seq": seqs}
    if raw:
        vf = next(f for f in schema.fields if f.name not in META)
        values: list[Any] = bodies
        if isinstance(vf.dataType, StringType):
            values = [b.decode("utf-8", "replace") for b in bodies]
        meta[vf.name] = values
        return pa.RecordBatch.from_arrays(
            [pa.array(meta[f.name], type=arrow.field(f.name).type) for f in schema.fields],
            schema=arrow)

    rows: list[Any] = []
    keep: list[int] = []
    for i, body in enumerate(bodies):
        try:
            obj = unpack(body)
        except Exception:
            obj = None
        if isinstance(obj, dict):
            rows.append(obj)
            keep.append(i)
        elif on_bad == "fail":
            raise SourceError(f"gsp source: message seq {seqs[i]} is not a msgpack map "
                              f"({bytes(body[:40])!r}); read it raw (no schema, or format 'raw') "
                              "or set on_bad_message 'skip'")
    while True:
        try:
            arrays = []
            for f in schema.fields:
                typ = arrow.field(f.name).type
                if f.name in META:
                    src = meta[f.name]
                    arrays.append(pa.array([src[i] for i in keep], type=typ))
                else:
                    arrays.append(_column([r.get(f.name) for r in rows], f.dataType, typ,
                                          f.name))
            return pa.RecordBatch.from_arrays(arrays, schema=arrow)
        except _BadValue as bad:
            if on_bad == "fail":
                raise SourceError(
                    f"gsp source: message seq {seqs[keep[bad.row]]}: field {bad.field!r} = "
                    f"{bad.value!r} does not fit {bad.type}; fix the producer or the schema, or "
                    "set on_bad_message 'skip'") from None
            del rows[bad.row], keep[bad.row]


class _BadValue(Exception):
    def __init__(self, row: int, field: str, value: Any, typ: Any) -> None:
        self.row, self.field, self.value, self.type = row, field, value, typ


def _column(values: list[Any], dtype: Any, typ: Any, name: str) -> Any:
    """An Arrow array of ``values`` as ``typ``, taking the forms the sink writes: timestamps as
    msgpack Timestamps, epoch seconds or ISO strings; dates and decimals as strings."""
    import pyarrow as pa

    conv = _CONVERT.get(type(dtype).__name__)
    if conv is not None:
        values = [v if v is None else conv(v) if not isinstance(v, _NATIVE[conv]) else v
                  for v in values]
    try:
        return pa.array(values, type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        for i, v in enumerate(values):  # slow path, only to name the culprit
            try:
                pa.array([v], type=typ)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                raise _BadValue(i, name, v, dtype.simpleString()) from None
        raise


def _to_datetime(v: Any) -> Any:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return _dt.datetime.fromtimestamp(v, _dt.timezone.utc)
    if isinstance(v, str):
        d = _dt.datetime.fromisoformat(v)
        return d if d.tzinfo else d.replace(tzinfo=_dt.timezone.utc)
    return v


def _to_date(v: Any) -> Any:
    return _dt.date.fromisoformat(v) if isinstance(v, str) else v


def _to_decimal(v: Any) -> Any:
    return decimal.Decimal(v) if isinstance(v, (str, int, float)) else v


def _safe(conv: Any) -> Any:
    def f(v: Any) -> Any:
        try:
            return conv(v)
        except (ValueError, OverflowError, OSError, decimal.InvalidOperation):
            # Left as is: the Arrow conversion then names the bad value. (OSError: a timestamp
            # far out of range, e.g. 10**17 s, is EOVERFLOW from the C library on Linux.)
            return v
    return f


_TS, _DATE, _DEC = _safe(_to_datetime), _safe(_to_date), _safe(_to_decimal)
_CONVERT = {"TimestampType": _TS, "TimestampNTZType": _TS, "DateType": _DATE,
            "DecimalType": _DEC}
_NATIVE = {_TS: _dt.datetime, _DATE: _dt.date, _DEC: decimal.Decimal}


def make_stream_reader(options: Any, schema: StructType) -> StreamReader:
    cfg = SourceConfig.parse(options)
    return StreamReader(cfg, schema)

