"""The sink's column-at-a-time msgpack encoder (:mod:`gsp_spark._arrowpack`): byte for byte what
packing each row's dict gives, on every form msgpack picks by value and on every Spark type the
sink carries. No Spark needed."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import random

import msgpack
import pyarrow as pa
import pytest

from gsp_spark import KEY, packer
from gsp_spark._arrowpack import pack_maps, split

pytestmark = pytest.mark.spark

PACK = packer().pack
INT_EDGES = [0, 1, 31, 32, 127, 128, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
             2**63 - 1, -1, -31, -32, -33, -128, -129, -32768, -32769, -2**31, -2**31 - 1, -2**63]
LENGTHS = [0, 1, 31, 32, 255, 256, 65535, 65536]  # every str/bin header form's edges


def by_rows(batch: pa.RecordBatch, key_items: list | None = None, first: int = 0) -> list[bytes]:
    """The reference: each row as a dict, packed by the sink's Packer (the encoder it replaced)."""
    rows = batch.to_pylist(maps_as_pydicts="strict")
    if key_items is not None:
        for i, r in enumerate(rows):
            r[KEY] = [*key_items, first + i]
    return [PACK(r) for r in rows]


def encoded(batch: pa.RecordBatch, key_items: list | None = None, first: int = 0) -> list[bytes]:
    if key_items is None:
        return pack_maps(batch, PACK).to_pylist()
    head = msgpack.packb([*key_items, 0])[:-1]  # the array without its last item
    return pack_maps(batch, PACK, KEY, head, first).to_pylist()


def test_integers_of_every_width_and_form():
    rng = random.Random(7)
    values = INT_EDGES + [rng.randint(-2**63, 2**63 - 1) for _ in range(300)] \
        + [rng.randint(-300, 300) for _ in range(300)]
    batch = pa.record_batch({
        "i64": pa.array(values + [None], pa.int64()),
        "i32": pa.array([v % 2**32 - 2**31 for v in values] + [None], pa.int32()),
        "i16": pa.array([v % 2**16 - 2**15 for v in values] + [None], pa.int16()),
        "i8": pa.array([v % 256 - 128 for v in values] + [None], pa.int8()),
    })
    assert encoded(batch) == by_rows(batch)
    for lo, hi in ((0, 100), (-20, 20), (200, 300), (2**40, 2**40 + 5), (-2**40, -2**40 + 5)):
        one_form = pa.record_batch({"n": pa.array(range(lo, hi), pa.int64())})
        assert encoded(one_form) == by_rows(one_form)


def test_floats_booleans_strings_binaries_and_nulls():
    rng = random.Random(8)
    n = 200
    floats = [math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324, 1.7976931348623157e308] + \
        [rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300) for _ in range(n - 7)]
    batch = pa.record_batch({
        "d": pa.array([None if i % 9 == 0 else v for i, v in enumerate(floats)], pa.float64()),
        "f": pa.array([v / 3 for v in range(n)], pa.float32()),
        "b": pa.array([None if i % 5 == 0 else i % 2 == 0 for i in range(n)]),
        "s": pa.array([None if i % 7 == 0 else "é" * LENGTHS[i % 8] + "x" * (i % 3)
                       for i in range(n)]),
        "y": pa.array([None if i % 11 == 0 else bytes(LENGTHS[i % 8]) for i in range(n)]),
        "z": pa.array([None] * n, pa.null()),
    })
    assert encoded(batch) == by_rows(batch)


def test_other_types_nested_values_keys_and_slices():
    n = 40
    utc = dt.timezone.utc
    batch = pa.record_batch({
        "ts": pa.array([dt.datetime(2024, 1, 1, 0, 0, i, tzinfo=utc) for i in range(n)],
                       pa.timestamp("us", tz="UTC")),
        "ntz": pa.array([dt.datetime(2024, 1, 1, 0, i) for i in range(n)], pa.timestamp("us")),
        "day": pa.array([dt.date(2024, 1, 1 + i % 28) for i in range(n)]),
        "dec": pa.array([decimal.Decimal(i) / 4 for i in range(n)], pa.decimal128(10, 2)),
        "list": pa.array([[i, None, -i] for i in range(n)]),
        "map": pa.array([[("k", i)] for i in range(n)], pa.map_(pa.string(), pa.int64())),
        "struct": pa.array([{"a": i, "b": str(i)} for i in range(n)]),
        "n": pa.array(range(n), pa.int64()),
    })
    key = ["0123456789abcdef", 3, 1]
    for first in (0, 200, 2**40):
        assert encoded(batch, key, first) == by_rows(batch, key, first)
    part = batch.slice(7, 20)  # an offset into the buffers, as Spark's batches may have
    assert encoded(part, key, 5) == by_rows(part, key, 5)
    assert encoded(batch.slice(0, 0), key) == []


def test_repeated_column_names_and_no_columns_match_a_dicts_packing():
    twice = pa.RecordBatch.from_arrays([pa.array([1, 2]), pa.array(["a", "b"]), pa.array([3, 4])],
                                       names=["x", "y", "x"])
    assert encoded(twice) == by_rows(twice)  # first place, last value
    none = pa.RecordBatch.from_struct_array(pa.array([{}, {}], pa.struct([])))
    assert encoded(none, ["w", 0, 0]) == by_rows(none, ["w", 0, 0])
    assert encoded(none) == [b"\x80", b"\x80"]


@pytest.mark.parametrize("per", [1, 2, 15, 16, 100, 70_000])
def test_split_packs_consecutive_rows_into_msgpack_arrays(per):
    n = 70_001
    batch = pa.record_batch({"n": pa.array(range(n), pa.int64())})
    rows = pack_maps(batch, PACK, KEY, b"\x94\xa1w\x00\x00", 0)
    messages = split(rows, per)
    assert len(messages) == -(-n // per)
    want = [{"n": i, KEY: ["w", 0, 0, i]} for i in range(n)]
    if per == 1:
        assert [msgpack.unpackb(m) for m in messages] == want
    else:
        assert [r for m in messages for r in msgpack.unpackb(m)] == want
        assert messages[0] == PACK(want[:per])  # the array header msgpack itself would write


def test_importing_gsp_spark_imports_no_pandas():
    """pyarrow imports pandas (where installed: the test extra's pyspark[connect] brings it) on
    its first scalar or array made from Python values. Spark's planner and data source lookup
    processes import gsp_spark and never pack: the encoder's constants are made on first use."""
    import subprocess
    import sys

    code = ("import sys, pyspark.sql.datasource, gsp_spark\n"
            "import importlib.util\n"
            "assert importlib.util.find_spec('pandas') is not None, 'pandas is not installed'\n"
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False"]
