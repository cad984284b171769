"""The KV event log (docs/events.md): Engine.events() as an iterator, the
resnapshot error, and a redis-py consumer tailing `prefixkv serve`'s stream
with XREAD while another client stores and deletes keys (and the hot tier
evicts) across a restart of the server: every change seen once, in order,
and after the restart the consumer resumes with no gap or is told to
resnapshot."""
import signal
import threading
import time

import numpy as np
import pytest

import prefixkv
from conftest import kv_layers, register
from servers import prefixkv_serve

STREAM = "prefixkv:events"


class Consumer:
    """Applies events in order to one key set per tier."""

    def __init__(self):
        self.next_seq = 0
        self.last_seq = 0
        self.tiers = {"hot": set(), "ssd": set()}
        self.resnapshots = 0

    def apply(self, seq, kind, tier, source, key):
        assert seq > self.last_seq, f"event {seq} after {self.last_seq}: repeated or out of order"
        self.last_seq = seq
        self.next_seq = seq + 1
        if kind == "moved":
            self.tiers.get(source, set()).discard(key)
        target = self.tiers.get(tier)
        if target is None:
            return
        if kind in ("stored", "moved"):
            target.add(key)
        elif kind == "removed":
            target.discard(key)
        elif kind == "cleared":
            target.clear()

    def apply_dict(self, e):
        self.apply(e["seq"], e["kind"], e["tier"], e["from"], e["key"])


def test_a_wait_longer_than_the_nanoseconds_hold_waits_for_the_next_event(engine, rng):
    """events(wait_ms=W) with W * 10**6 past 2**64 (W = 18446744073710, ~584
    years, what "wait forever" may be written as): the wait in nanoseconds
    wrapped to 448384, so the iterator stopped at once with nothing instead
    of waiting for the store below. Bounded: the store wakes a right wait."""
    ns = register(engine)
    head = engine.event_log_stats()["head_seq"]
    got = []
    waiter = threading.Thread(
        target=lambda: got.append(next(engine.events(head + 1, wait_ms=18446744073710), None)))
    waiter.start()
    waiter.join(0.5)  # the waiter is in its wait (were it not yet, no false failure)
    engine.store(ns, list(range(8)), kv_layers(rng, 2, 8))
    waiter.join(30)
    assert not waiter.is_alive()
    assert got and got[0] is not None, "the wait ended at once: its nanoseconds wrapped"
    assert got[0]["seq"] == head + 1 and got[0]["kind"] == "stored"


def test_a_signal_handler_ends_a_wait_for_events_at_once(engine, rng):
    """A caught-up tail waiting long (events(wait_ms=20 s)) in the main
    thread: a signal's Python handler (Ctrl-C's KeyboardInterrupt, a SIGTERM
    handler; SIGALRM here) must run and its exception end the wait. The wait
    ran without the GIL and never checked for signals, so the handler ran only
    when the wait ran out (20 s here; never, for a tail waiting for ever). The
    iterator goes on afterwards. Bounded by the 20 s wait."""
    ns = register(engine)
    head = engine.event_log_stats()["head_seq"]
    it = engine.events(head + 1, wait_ms=20_000)

    class Interrupted(Exception):
        """KeyboardInterrupt's stand-in (one would end the pytest run)."""

    def interrupt(signum, frame):
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        start = time.monotonic()
        with pytest.raises(Interrupted):
            next(it, None)
        waited = time.monotonic() - start
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert waited < 5, f"the handler ran only after {waited:.1f} s, when the wait ran out"
    engine.store(ns, list(range(8)), kv_layers(rng, 2, 8))
    event = next(it)
    assert event["seq"] == head + 1 and event["kind"] == "stored"


def test_events_iterate_in_order_and_resume(data_dir, rng):
    tokens = list(range(24))
    c = Consumer()
    with prefixkv.Engine.open(data_dir=data_dir, hot_bytes=1 << 20, quiet=True,
                              write_through=True) as e:
        e.store(register(e), tokens, kv_layers(rng, 2, len(tokens)))
        it = e.events(0)
        for event in it:
            c.apply_dict(event)
        assert it.next_seq == c.next_seq
        assert c.last_seq == e.event_log_stats()["head_seq"]
    with prefixkv.Engine.open(data_dir=data_dir, hot_bytes=1 << 20, quiet=True) as e:
        for event in e.events(c.next_seq):
            c.apply_dict(event)
        snap = e.event_snapshot()
        assert snap["seq"] == c.last_seq
        assert c.tiers["ssd"] == {b["key"] for b in snap["ssd"]}
        assert len(c.tiers["ssd"]) == e.stats()["ssd"]["entries"] == 6
        assert c.tiers["hot"] == set()


def test_a_consumer_ahead_of_the_log_must_resnapshot(engine):
    head = engine.event_log_stats()["head_seq"]
    with pytest.raises(prefixkv.OutOfRange) as err:
        list(engine.events(head + 2))
    assert "resnapshot" in str(err.value)
    assert list(engine.events(head + 1)) == []
    # Caught up: waits wait_ms for the next event, then stops.
    assert list(engine.events(head + 1, wait_ms=20)) == []


def test_events_off(data_dir):
    with prefixkv.Engine.open(data_dir=data_dir, quiet=True, event_log=False) as e:
        assert not e.event_log_stats()["enabled"]
        with pytest.raises(prefixkv.NotSupported):
            list(e.events(0))


def tail(client, consumer, block_ms=0):
    """Reads the stream from the consumer's position; False when told to
    resnapshot."""
    redis = pytest.importorskip("redis")
    last = f"{consumer.last_seq}-0"
    try:
        reply = client.xread({STREAM: last}, count=1000,
                             block=block_ms if block_ms else None)
    except redis.exceptions.ResponseError as e:
        assert str(e).startswith("RESNAPSHOT"), e
        return False
    for _, entries in reply or []:
        for entry_id, f in entries:
            seq = int(entry_id.decode().split("-")[0])
            consumer.apply(seq, f[b"kind"].decode(), f[b"tier"].decode(),
                           f[b"from"].decode(), f[b"key"].decode())
    return True


def drain(client, consumer):
    while True:
        before = consumer.last_seq
        assert tail(client, consumer)
        if consumer.last_seq == before:
            return


def test_redis_consumer_tails_the_stream_across_a_restart(tmp_path):
    data = tmp_path / "data"
    c = Consumer()
    # A small hot tier: the SETs evict, and the evicted values move to SSD.
    args = ("--hot-capacity-bytes", "256K")
    with prefixkv_serve(data, *args) as (port, writer):
        import redis
        # Bounds only for a failure (a loaded machine may take seconds to
        # schedule the writer): the XREAD waits up to 60 s, the socket 90 s.
        reader = redis.Redis(port=port, socket_timeout=90)
        drain(reader, c)  # the hot tier's kCleared at open
        got = []
        blocked = threading.Thread(target=lambda: got.append(
            reader.xread({STREAM: f"{c.last_seq}-0"}, block=60_000, count=1)))
        blocked.start()
        writer.set("first", b"x" * 100)
        blocked.join(120)
        assert got and got[0], "XREAD BLOCK did not wake on the SET"
        for i in range(300):
            writer.set(f"k{i}", b"v" * 4000)
        for i in range(0, 300, 3):
            writer.delete(f"k{i}")
        drain(reader, c)
        assert len(c.tiers["hot"]) + len(c.tiers["ssd"]) >= 1
        keys_before = writer.dbsize()
    with prefixkv_serve(data, *args) as (port, writer):
        import redis
        reader = redis.Redis(port=port, socket_timeout=10)
        if not tail(reader, c):
            pytest.fail("a clean restart must not lose the consumer's position")
        drain(reader, c)
        assert writer.dbsize() == keys_before
        # At open the hot tier is empty: every value is on SSD, and so says
        # the consumer.
        assert c.tiers["hot"] == set()
        assert len(c.tiers["ssd"]) == keys_before
        info = reader.info("events")
        assert info["events_head_seq"] == c.last_seq
