"""The test files that may read gsp's internals, each with why.

Tests go through gsp's public API (and the SDKs, ``gsp.protocol`` and ``gsp.transport``), so that
they say what gsp promises and survive a change of how it keeps it. A few test a piece whose
behaviour is its internals (a codec's buffers, a reader's parking): those may read private
attributes and import private modules, and are listed here. tests/project/test_suite_rules.py
holds every other test file to the public surface.
"""

from __future__ import annotations

from typing import Any


def reader_of(pipe: Any) -> Any:
    """The greenlet reading ``pipe`` now, or None while it parks (no reader between messages):
    what the reader tests of the files below watch, read in this one place."""
    return pipe._reader

#: path (from the repository's root) -> why that file reads internals
WHITE_BOX: dict[str, str] = {}
WHITE_BOX["plugins/gsp-ws/tests/test_ws_codec.py"] = "the ws frame codec: its buffers grow by what arrived (its read-ahead bound), and its pure-Python mask fallback matches the compiled one"
WHITE_BOX["plugins/gsp-ws/tests/test_ws_frames.py"] = "the ws pipes over the codec's pure-Python mask fallback, and message sizes around the codec's direct-read threshold"
WHITE_BOX["tests/serving/test_prefork.py"] = "prefork's accept turns timed against a hub held busy, which no public call can arrange"
WHITE_BOX["tests/core/test_readers.py"] = "reader greenlets only while bytes come: a socket's idle readers, a stream connection's read watcher (armed or not) and the reads it makes on its socket, which no public call shows"  # noqa: E501
WHITE_BOX["tests/core/test_lent_reads.py"] = "lent reads: the readers' one-turn guard timer counted and held, a pipe's lent read interrupted, its connection's read watcher stopped by a reader"  # noqa: E501
WHITE_BOX["tests/core/test_fastpath.py"] = "the send fast paths: a connection's direct write on a stand-in socket, a pipe's delivery within one loop turn, the join limit of a sendmsg, push's send bypassing its protocol"  # noqa: E501
WHITE_BOX["tests/core/test_gather_body.py"] = "the stream codec's gather buffer for big ipc bodies: made, reused, dropped, never for less than half a body"  # noqa: E501
WHITE_BOX["tests/core/test_contexts.py"] = "a request handed to a parked REP context interrupted before it ran: the race needs the protocol's delivery and the interrupt in one loop turn"  # noqa: E501
WHITE_BOX["tests/core/test_logging.py"] = "the rate limit of repeated warnings, shortened from its 10 s so that a test sees it repeat"  # noqa: E501
WHITE_BOX["tests/core/test_queue_bytes.py"] = "the inbox's count of bytes by position stays a few marks while its consumer keeps up (a bound on its bookkeeping); a big body's prefix read alone before its body comes"  # noqa: E501
WHITE_BOX["tests/core/test_memory.py"] = "waits until a socket's pipes hold a peer's bytes of a message still arriving (what max_recv_partial bounds), which no stat shows"  # noqa: E501
WHITE_BOX["tests/project/test_build.py"] = "setup.py's build hooks compile exactly the modules gsp._mypyc names, the list gsp info reports"  # noqa: E501
WHITE_BOX["plugins/gsp-spark/tests/test_spark_columnar.py"] = "gsp-spark's private decoders: the columnar one decodes column for column what the struct decoder does, and declines what it cannot"  # noqa: E501
WHITE_BOX["plugins/gsp-spark/tests/test_spark_arrow.py"] = "gsp-spark's private Arrow packing of maps, round-tripped against the rows Spark makes of them"  # noqa: E501
WHITE_BOX["plugins/gsp-spark/tests/test_spark_source.py"] = "the source's spool records and chunk decoding, which an executor reads and no public call shows"  # noqa: E501
WHITE_BOX["plugins/gsp-spark/tests/test_spark_connect.py"] = "the Spark Connect server the test session starts (its URL helper is the test harness's)"  # noqa: E501
WHITE_BOX["plugins/gsp-spark/tests/test_spark_lifecycle.py"] = "the JVM's own java.io.tmpdir, read through PySpark's gateway (sparkContext._jvm)"  # noqa: E501
WHITE_BOX["tests/core/test_select_sockets.py"] = "an object of the test's own in gsp.select, made of a socket's private part of gsp.poller.Selectable (only gsp's objects implement it)"  # noqa: E501
