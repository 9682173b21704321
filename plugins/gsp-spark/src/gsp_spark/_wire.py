"""The sink's wire format and the receiving side's duplicate filter (no Spark needed here).

One gsp message per row: a msgpack map of the row's columns plus ``_gsp_key`` =
``[writer_id, batch_id, partition, seq]``; with ``batch_rows=N`` a msgpack array of up to N such
maps. A Spark task retry re-sends its partition from ``seq`` 0 with the same key prefix, so a
receiver drops repeats by key (:class:`Deduplicator`).
"""

from __future__ import annotations

import datetime as _dt
import decimal
from collections import OrderedDict
from typing import Any, Iterable

import msgpack

KEY = "_gsp_key"

Key = tuple[str, int, int, int]


def _default(obj: Any) -> Any:
    # Spark values msgpack has no native type for; documented in docs/spark.md.
    if isinstance(obj, decimal.Decimal):
        return str(obj)
    if isinstance(obj, _dt.datetime):  # naive (TIMESTAMP_NTZ): aware ones are packed natively
        return obj.isoformat()
    if isinstance(obj, _dt.date):
        return obj.isoformat()
    if isinstance(obj, _dt.timedelta):
        return obj.total_seconds()
    if isinstance(obj, (bytearray, memoryview)):
        return bytes(obj)
    raise TypeError(f"cannot msgpack-encode a {type(obj).__name__}")


def packer() -> msgpack.Packer:
    """The sink's encoder: aware datetimes become msgpack Timestamps, see :func:`_default`."""
    return msgpack.Packer(datetime=True, default=_default)


def unpack(data: bytes) -> Any:
    """Decode one message as receivers should: str keys, Timestamps as aware datetimes."""
    return msgpack.unpackb(data, timestamp=3, strict_map_key=False)


class Deduplicator:
    """Drops rows whose ``_gsp_key`` was already seen, e.g. re-sent by a retried Spark task.

    Memory stays small: per stream ``(writer_id, batch_id, partition)`` it keeps a watermark below
    which every ``seq`` was seen, plus the seqs seen above it (only while they arrive out of
    order). At most ``max_streams`` streams are remembered, least recently used dropped first
    (a retry of a stream forgotten that way would get through again).
    """

    def __init__(self, max_streams: int = 100_000) -> None:
        self.max_streams = max_streams
        self._streams: OrderedDict[tuple[str, int, int], list[Any]] = OrderedDict()
        self.accepted = 0  #: rows passed on
        self.duplicates = 0  #: rows dropped
        self.unkeyed = 0  #: rows without a key (passed on)

    def is_new(self, key: Iterable[Any]) -> bool:
        """Record ``key`` and tell whether it is seen for the first time."""
        wid, bid, part, seq = key
        sid = (wid, bid, part)
        st = self._streams.get(sid)
        if st is None:
            st = self._streams[sid] = [0, set()]
            if len(self._streams) > self.max_streams:
                self._streams.popitem(last=False)
        else:
            self._streams.move_to_end(sid)
        mark, above = st
        if seq < mark or seq in above:
            self.duplicates += 1
            return False
        if seq == mark:
            mark += 1
            while mark in above:  # close the gap that out-of-order arrivals left
                above.discard(mark)
                mark += 1
            st[0] = mark
        else:
            above.add(seq)
        self.accepted += 1
        return True

    def rows(self, message: bytes) -> list[dict[str, Any]]:
        """Decode one sink message (a map or an array of maps) and return its rows not seen before.

        Each returned row still carries its ``_gsp_key``.
        """
        obj = unpack(message)
        out = []
        for row in obj if isinstance(obj, list) else [obj]:
            key = row.get(KEY) if isinstance(row, dict) else None
            if key is None:
                self.unkeyed += 1
                out.append(row)
            elif self.is_new(key):
                out.append(row)
        return out
