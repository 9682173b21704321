"""The source's life cycle on a real local Spark: what a query leaves behind when it stops, when
its session stops, and the triggers that stop by themselves (``availableNow``, ``once``).

"Released" means: the process that hosted the receiver (its pid is in the spool's LOCK) is gone,
with the receiver thread; nothing listens at the source's address; the spool's lock is free.
The spool's segment files stay, on purpose: they are what a restarted query reads.
The session-stop test stops the session the local modules share: it runs after them.
"""

from __future__ import annotations

import fcntl
import glob
import os
import threading
from typing import Any

import msgpack
import pytest
import spark_fixtures

import gsp
from gsp_spark import HubThread

pytestmark = [pytest.mark.spark, spark_fixtures.LOCAL_GROUP]
no_leaks = spark_fixtures.no_leaks  # autouse: no greenlet or socket left behind by a test
ipc_dir = spark_fixtures.ipc_dir
wait_for = spark_fixtures.wait_for


@pytest.fixture(scope="module")
def spark():
    # The session the local modules share (the session-stop test stops it, after the other
    # tests of the group).
    return spark_fixtures.shared_session()


def test_the_jvms_scratch_files_go_to_the_test_sessions_own_directory(spark: Any) -> None:
    # conftest gives every JVM a java.io.tmpdir of the session's own, removed at its end: a
    # driver or executor these tests SIGKILL would leave its scratch files in /tmp for good.
    options = os.environ["JAVA_TOOL_OPTIONS"].split()
    scratch = [o.split("=", 1)[1] for o in options if o.startswith("-Djava.io.tmpdir=")]
    assert len(scratch) == 1 and os.path.realpath(scratch[0]) != os.path.realpath("/tmp")
    assert spark.sparkContext._jvm.System.getProperty("java.io.tmpdir") == scratch[0]
    assert glob.glob(os.path.join(scratch[0], "blockmgr-*"))  # this driver's block manager


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has let go of all
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or before the read
        return False


def _lock_free(spool: str) -> bool:
    fd = os.open(os.path.join(spool, "LOCK"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _owner(spool: str) -> int:
    with open(os.path.join(spool, "LOCK")) as f:
        return int(f.read().strip())


def assert_released(spool: str, path: str, owner: int) -> None:
    wait_for(lambda: not _alive(owner) and _lock_free(spool) and not spark_fixtures.ipc_listening(path), 30,
             f"the source (pid {owner}) to release {path} and {spool}")


def send(url: str, ns: range) -> int:
    """PUSH ``{"n": n}`` for each n to the source; returns the bytes the spool will hold."""
    bodies = [msgpack.packb({"n": n}) for n in ns]

    def push(stop: threading.Event) -> None:
        with gsp.socket("push", dial=url, send_timeout=60, linger=30) as s:
            for b in bodies:
                s.send(b)

    HubThread(push, "producer").join(90)
    return sum(16 + len(b) for b in bodies)  # a spool record: 16-byte header + body


def spooled_bytes(spool: str) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(spool, "*.gsps")))


@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_stop_available_now_and_once_read_the_spool_and_release(spark, ipc_dir, tmp_path):
    path = f"{ipc_dir}/src.sock"
    spool, out, ck = str(tmp_path / "spool"), str(tmp_path / "out"), str(tmp_path / "ck")

    def start(**trigger: Any) -> Any:
        return (spark.readStream.format("gsp").schema("n BIGINT, _seq BIGINT")
                .option("url", f"ipc://{path}").option("spool", spool).load()
                .writeStream.format("parquet").option("path", out)
                .option("checkpointLocation", ck).trigger(**trigger).start())

    def receive_only(ns: range, total_bytes: int) -> int:
        # A query whose next trigger is an hour away: after its first (empty) batch its source
        # only spools what arrives; stopping it must release the source.
        q = start(processingTime="1 hour")
        wait_for(lambda: q.status["message"].startswith("Waiting for next trigger"), 60,
                 "the first trigger")
        total_bytes += send(f"ipc://{path}", ns)
        wait_for(lambda: spooled_bytes(spool) >= total_bytes, 30, "the messages in the spool")
        owner = _owner(spool)
        q.stop()
        assert_released(spool, path, owner)
        return total_bytes

    def drain(**trigger: Any) -> list[int]:
        q = start(**trigger)
        q.awaitTermination(120)  # these triggers end the query by themselves
        assert not q.isActive and q.exception() is None
        assert_released(spool, path, _owner(spool))
        return sorted(r.n for r in spark.read.parquet(out).collect())

    size = receive_only(range(0, 100), 0)
    assert drain(availableNow=True) == list(range(100))
    receive_only(range(100, 150), size)
    assert drain(once=True) == list(range(150))


@pytest.mark.stops_shared_session  # conftest.py runs it after the rest of its group
@pytest.mark.timeout(300)  # Spark on 2 shared cores: its own waits bound it
def test_session_stop_releases_a_running_source(spark, ipc_dir, tmp_path):
    """Last in its group (conftest.py moves it there): stops the session the group shares.
    Spark's own stop leaves the source's process waiting for the driver to exit; gsp_spark
    stops the session's queries first."""
    path, spool = f"{ipc_dir}/live.sock", str(tmp_path / "spool")
    q = (spark.readStream.format("gsp").option("url", f"ipc://{path}").option("spool", spool)
         .load().writeStream.format("memory").queryName("live")
         .option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="300 milliseconds").start())
    send(f"ipc://{path}", range(10))
    wait_for(lambda: spark.sql("SELECT count(*) AS c FROM live").first().c >= 10, 60, "10 rows")
    owner = _owner(spool)
    spark.stop()
    assert not q.isActive
    assert_released(spool, path, owner)
