"""The batch and streaming sinks: each Spark task sends its partition over its own gsp socket.

A writer object is built once on the driver and pickled to every task, so it holds only its
configuration; the socket is opened inside ``write`` on the executor and closed before it returns.
The Arrow writer variants are used: Spark hands over record batches, which are msgpack-encoded a
column at a time (:mod:`gsp_spark._arrowpack`), not one Python object per row.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

import gevent
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

import gsp

from ._arrowpack import pack_maps, split
from ._config import SinkConfig
from ._types import check_sink_schema
from ._wire import KEY, packer

log = logging.getLogger("gsp.spark")


class SinkError(gsp.GspError):
    """A sink task could not deliver: no peer in time, or (req) no acknowledgement in time."""


@dataclass
class SinkCommit(WriterCommitMessage):
    partition: int
    rows: int
    messages: int
    dropped: int  #: pub only: messages its queues had to drop


class _Out:
    """One task's gsp socket: waits for a peer, sends, and with ``req`` keeps a window of
    requests in flight (one context each) and returns only once every one was acknowledged."""

    def __init__(self, cfg: SinkConfig) -> None:
        self.cfg = cfg
        req = cfg.protocol == "req"
        opts: dict[str, Any] = {"send_timeout": cfg.send_timeout, "send_buffer": 1024,
                                "max_reconnect_time": 1.0,
                                # push/pub: close() flushes queued messages for up to this long
                                "linger": cfg.send_timeout}
        if req:
            opts["resend_time"] = cfg.resend_time
        self.sock = gsp.socket(cfg.protocol, **opts)
        self._error: BaseException | None = None
        self._workers: list[gevent.Greenlet] = []
        try:
            for url in cfg.urls:
                if cfg.mode == "dial":
                    self.sock.dial(url)  # retried in the background until the peer is up
                else:
                    self.sock.listen(url)
            self._wait_peer()
            if req:
                self._queue: gsp.Chan[Any] = gsp.Chan(cfg.window)
                self._workers = [gevent.spawn(self._acked, self.sock.open_context())
                                 for _ in range(cfg.window)]
        except BaseException:
            self.close()
            raise

    def _wait_peer(self) -> None:
        # PUB drops messages while it has no subscriber, PUSH/REQ would block: wait here, with a
        # clear error, rather than lose rows or hang on send_timeout.
        deadline = time.monotonic() + self.cfg.connect_timeout
        while not self.sock.pipes:
            if time.monotonic() > deadline:
                errs = [repr(d.last_error) for d in self.sock.dialers if d.last_error]
                raise SinkError(f"gsp sink: no peer connected to {', '.join(self.cfg.urls)} "
                                f"within {self.cfg.connect_timeout:g} s"
                                + (f" ({'; '.join(errs)})" if errs else ""))
            gevent.sleep(0.01)

    def _acked(self, ctx: Any) -> None:
        ctx.recv_timeout = self.cfg.ack_timeout  # REQ resends every resend_time meanwhile
        try:
            for data in self._queue:
                ctx.send(data)
                ctx.recv()
        except gsp.GspError as exc:
            if self._error is None:
                self._error = exc
            self._queue.close()
        finally:
            ctx.close()

    def send(self, data: bytes) -> None:
        if not self._workers:
            self.sock.send(data)
            return
        try:
            self._queue.send(data)
        except gsp.Closed:
            raise SinkError(f"gsp sink: a request was not acknowledged: {self._error!r}") \
                from self._error

    def finish(self) -> int:
        """Wait until everything is delivered (req: acknowledged); returns PUB's drop count."""
        if self._workers:
            self._queue.close()
            gevent.joinall(self._workers)
            if self._error is not None:
                raise SinkError(f"gsp sink: a request was not acknowledged within "
                                f"{self.cfg.ack_timeout:g} s: {self._error!r}") from self._error
        dropped = int(self.sock.stats.get("dropped", 0))
        self.sock.close()  # push/pub: lingers until the queued messages are written
        return dropped

    def close(self) -> None:
        if self._workers:
            self._queue.close()
            gevent.killall(self._workers)
        self.sock.close()


class _Writes:
    """What a :class:`BatchWriter` and a :class:`StreamWriter` write with: the sink's options,
    the column sent, and the id its keys carry."""

    def __init__(self, options: Any, schema: StructType) -> None:
        self.cfg = SinkConfig.parse(options)
        self.value_index = check_sink_schema(schema, self.cfg.format)
        # Batch jobs: one id per write job, shared by all its task attempts (pickled with us).
        self.writer_id = uuid.uuid4().hex

    def write(self, batches: Iterator[Any]) -> SinkCommit:
        from pyspark import TaskContext

        tc = TaskContext.get()
        part = tc.partitionId() if tc else 0
        # Streaming: the query id survives restarts (it lives in the checkpoint), so a micro-batch
        # replayed after a restart carries the same keys as its first run.
        qid = tc.getLocalProperty("sql.streaming.queryId") if tc else None
        bid = tc.getLocalProperty("streaming.sql.batchId") if tc else None
        wid, batch = qid or self.writer_id, int(bid) if bid is not None else 0
        out = _Out(self.cfg)
        rows = msgs = 0
        try:
            send = out.send
            if self.value_index >= 0:
                for rb in batches:
                    values = pc.drop_null(rb.column(self.value_index))  # NULL: no bytes to send
                    for v in values.cast(pa.binary()).to_pylist():
                        send(v)
                    msgs += len(values)
                    rows += rb.num_rows
            else:
                pack = packer().pack
                key_head = b"\x94" + pack(wid) + pack(batch) + pack(part)  # the key but its seq
                for rb in batches:
                    encoded = split(pack_maps(rb, pack, KEY, key_head, rows), self.cfg.batch_rows)
                    for data in encoded:
                        send(data)
                    msgs += len(encoded)
                    rows += rb.num_rows
            dropped = out.finish()
        finally:
            out.close()
        return SinkCommit(part, rows, msgs, dropped)


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options: Any, schema: StructType) -> None:
        self._writes = _Writes(options, schema)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return self._writes.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit(messages, None)


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: Any, schema: StructType) -> None:
        self._writes = _Writes(options, schema)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return self._writes.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_commit(messages, batchId)


def _log_commit(messages: list[Any], batch_id: int | None) -> None:
    done = [m for m in messages if isinstance(m, SinkCommit)]
    dropped = sum(m.dropped for m in done)
    log.log(logging.WARNING if dropped else logging.DEBUG,
            "gsp sink batch %s: %d rows in %d messages, %d dropped by pub", batch_id,
            sum(m.rows for m in done), sum(m.messages for m in done), dropped)
