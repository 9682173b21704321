"""gsp.protocol helpers that protocols (and third-party plugins) build on: ChangeNotice, Inbox, and the
backtrace's IdMap, split_backtrace and reply. (.ci/run runs this file against the wheel too,
where the backtrace module is compiled.)"""

from __future__ import annotations

import gevent
import pytest

import gsp
from gsp.chan import select_channels
from gsp.message import JOIN_MAX
from gsp.protocol import HIGH_BIT, Alarm, ChangeNotice, IdMap, Inbox, reply, split_backtrace
from gsp.testing import wait_for

pytestmark = pytest.mark.core


@pytest.mark.parametrize("policy", ["drop_oldest", "drop_newest", "block"])
def test_put_all_matches_put_one_by_one(policy: str) -> None:
    for cap, before, batch in [(5, 0, 3), (5, 2, 3), (5, 4, 3), (5, 5, 9), (3, 1, 12), (4, 0, 0)]:
        if policy == "block" and before + batch > cap:
            continue  # block would wait: covered below
        a, b = Inbox(cap, policy), Inbox(cap, policy)
        for i in range(before):
            a.put(("old", i))
            b.put(("old", i))
        items = [("new", i) for i in range(batch)]
        dropped_a = sum(not a.put(x) for x in items)
        dropped_b = b.put_all(items)
        assert list(b.ready) == list(a.ready), (cap, before, batch)
        assert dropped_b == dropped_a and b.dropped == a.dropped


def test_put_all_lets_waiting_receivers_drain_before_dropping() -> None:
    box = Inbox(4, "drop_oldest")
    got: list[int] = []

    def reader() -> None:
        while len(got) < 10:
            got.append(box.get(timeout=2))

    g = gevent.spawn(reader)
    gevent.sleep(0)  # the reader waits on the empty queue
    assert box.put_all(list(range(10))) == 0  # 10 items through a 4-slot queue, none lost
    g.join(timeout=2)
    assert got == list(range(10)) and box.dropped == 0


def test_put_all_blocking_policy_waits_for_room() -> None:
    box = Inbox(2, "block")
    g = gevent.spawn(box.put_all, [1, 2, 3, 4])
    gevent.sleep(0.01)
    assert not g.ready() and list(box.ready) == [1, 2]
    assert [box.get(timeout=1) for _ in range(4)] == [1, 2, 3, 4]
    assert g.get(timeout=1) == 0


def test_put_all_on_a_closed_inbox_raises_closed() -> None:
    box = Inbox(4, "drop_oldest")
    box.close()
    with pytest.raises(gsp.Closed):
        box.put_all([1])


def test_signal_wakes_every_waiter_once_per_fire() -> None:
    sig = ChangeNotice()
    woken: list[int] = []

    def waiter(i: int) -> None:
        select_channels([sig.case()], 2)
        woken.append(i)

    gs = [gevent.spawn(waiter, i) for i in range(3)]
    gevent.sleep(0)
    sig.fire()
    gevent.joinall(gs, timeout=2, raise_error=True)
    assert sorted(woken) == [0, 1, 2]
    with pytest.raises(gsp.Timeout):  # fired already: a new case waits for the next fire
        select_channels([sig.case()], 0.01)


def test_signal_fires_nobody_asked_about_cost_nothing_and_lose_nothing() -> None:
    sig = ChangeNotice()
    sig.fire()  # no case handed out: nothing to wake
    sig.fire()
    case = sig.case()  # taken before the fire it waits for, not yet selected on
    sig.fire()
    assert select_channels([case], 0) == (0, gsp.chan.CLOSED)  # that fire is not lost
    sig.close()
    assert select_channels([sig.case()], 0) == (0, gsp.chan.CLOSED)  # closed: ready for good


def test_idmap_ids_have_the_high_bit_and_are_not_reused_while_live() -> None:
    ids = IdMap()
    ids._next = 0x7FFFFFFE  # two ids before the 31 bits wrap around
    first = [ids.alloc(k) for k in range(3)]
    assert first == [0xFFFFFFFE, 0xFFFFFFFF, HIGH_BIT]  # wrapped, high bit kept
    assert [ids.get(r) for r in first] == [0, 1, 2]
    ids._next = 0x7FFFFFFF  # the next candidate is live: skipped, not handed out twice
    assert ids.alloc("x") == HIGH_BIT | 1
    assert ids.pop(first[0]) == 0 and ids.pop(first[0]) is None
    assert sorted(map(str, ids.owners())) == ["1", "2", "x"]


def test_a_protocol_may_subclass_idmap() -> None:
    """A third party builds on IdMap as the built-ins do; in the wheel, a compiled class."""
    class Counted(IdMap):
        def __init__(self) -> None:
            super().__init__()
            self.handed = 0

        def alloc(self, owner: object) -> int:
            self.handed += 1
            return super().alloc(owner)

    ids = Counted()
    rid = ids.alloc("a")
    assert rid & HIGH_BIT and ids.live == {rid: "a"} and ids.handed == 1


def test_split_backtrace_takes_words_up_to_the_first_with_the_high_bit() -> None:
    hop, rid = (7).to_bytes(4, "big"), (HIGH_BIT | 5).to_bytes(4, "big")
    assert split_backtrace(hop + rid + b"body", 8) == (hop + rid, b"body")
    assert split_backtrace(rid, 8) == (rid, b"")
    assert split_backtrace(hop + rid + b"body", 1) is None  # more hops than allowed
    assert split_backtrace(hop + b"\x80\x00", 8) is None  # the id word is cut short
    assert split_backtrace(b"", 8) is None


def test_reply_joins_a_small_body_and_wraps_a_big_one_without_a_copy() -> None:
    rid = (HIGH_BIT | 9).to_bytes(4, "big")
    assert reply(rid, b"small") == rid + b"small"
    big = b"x" * (JOIN_MAX + 1)
    msg = reply(rid, big)
    assert isinstance(msg, gsp.Message) and msg.header == rid and msg.body is big


def test_alarm_arm_in_arms_for_the_earliest_deadline_and_says_which() -> None:
    fired: list[float] = []
    alarm = Alarm(lambda: fired.append(alarm.now()))
    try:
        later = alarm.arm_in(0.2)
        assert later == pytest.approx(alarm.now() + 0.2, abs=0.01) and alarm.at == later
        sooner = alarm.arm_in(0.02)  # earlier: re-armed for it
        assert alarm.at == sooner < later
        assert alarm.arm_in(5.0) > sooner and alarm.at == sooner  # later: left as armed
        wait_for(lambda: fired, what="the alarm")
        gevent.sleep(0)  # (a second firing would come in the same turn)
        assert len(fired) == 1 and fired[0] >= sooner  # once, at its time
        assert alarm.at == float("inf")  # disarmed once fired: arm_in arms it again
        assert alarm.arm_in(0.01) == alarm.at
    finally:
        alarm.close()
