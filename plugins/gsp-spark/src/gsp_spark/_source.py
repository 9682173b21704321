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

import logging
import threading
import time
import weakref
from typing import Any, Iterator

import gevent
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

import gsp

from ._config import SourceConfig
from ._decode import SourceError, _Chunk, decode_chunk
from ._spool import Spool
from ._types import check_source_schema

try:  # pyspark >= 4.2: read limits and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - pyspark 4.1
    ReadMaxRows = None  # type: ignore[assignment,misc]
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]

log = logging.getLogger("gsp.spark")

_DRAIN = 8192  # most messages spooled (and, with rep, fsynced and acknowledged) as one group
# Fewer than _GATHER messages queued: wait _GATHER_WAIT seconds for more before spooling them, so a
# steady stream is written (and, with rep, fsynced) in groups of thousands, not of one TCP read.
_GATHER, _GATHER_WAIT = 1024, 0.002
_POLL = 0.1  # seconds the receiver waits per recv before looking at its stop flag
_REBIND = 20.0  # seconds a listener retries an address its predecessor process still holds
# Fewest messages a micro-batch's partition gets: every Spark task that reads one costs a fixed
# round of task launch, Python worker hand-off and Arrow stream set-up, and on a small machine two
# decoding at once only contend with the receiver and the JVM. Measured on local[2]
# 500,000-row micro-batches in one task gave the benchmark 2x the rate of 200,000 in two.
_PART_ROWS = 1 << 18


class _Receiver(threading.Thread):
    """Owns the gsp socket: receives, spools in groups, and (rep) acknowledges after fsync."""

    def __init__(self, cfg: SourceConfig, spool: Spool, pipes: bool = True) -> None:
        super().__init__(name="gsp-spark-receiver", daemon=True)
        self.cfg = cfg
        self.spool = spool
        self.pipes = pipes  # False: the schema has no _pipe, spool 0 (recv is ~2x cheaper)
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
                          send_timeout=5.0, recv_buffer=_DRAIN, max_recv_size=cfg.recv_max_size)
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
        if self.cfg.protocol == "rep" or self.pipes:
            self._loop_msgs(sock)
            return
        spool = self.spool
        recv_many = sock.recv_many
        while not self._stopping:
            try:  # the first to arrive, then whatever else is queued
                bodies = recv_many(_DRAIN)
            except gsp.Timeout:
                continue
            if len(bodies) < _GATHER:
                gevent.sleep(_GATHER_WAIT)
                if sock.poll():
                    bodies += recv_many(_DRAIN - len(bodies), block=False)
            spool.append(bodies, None, time.time())
            self.durable = spool.next_seq

    def _loop_msgs(self, sock: gsp.Socket) -> None:
        """The loop with whole messages: their pipes, and (rep) their headers to reply to."""
        ack = self.cfg.protocol == "rep"
        spool = self.spool
        while not self._stopping:
            try:
                msgs = [sock.recv_msg()]
            except gsp.Timeout:
                continue
            try:
                while len(msgs) < _DRAIN:
                    msgs.append(sock.recv_msg(block=False))
            except gsp.WouldBlock:
                pass
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
            rx = _Receiver(self.cfg, spool, pipes="_pipe" in self.schema.names)
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
        n = hi - lo
        parts = max(1, min(self.cfg.partitions, n // _PART_ROWS))
        out: list[InputPartition] = []
        for i in range(parts):  # each read straight from the spool files: no copy of the batch
            data, offs, first = self._spool.read(lo + i * n // parts, lo + (i + 1) * n // parts)
            if offs:
                out.append(_Chunk(first, data, offs.tobytes()))
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


def make_stream_reader(options: Any, schema: StructType) -> StreamReader:
    cfg = SourceConfig.parse(options)
    return StreamReader(cfg, schema)

