"""Threads call one engine in parallel; calls release the GIL."""
import threading
import time

import numpy as np

import prefixkv
from conftest import kv_layers, register


def test_threads_store_and_restore_in_parallel(engine, rng):
    ns = register(engine)
    shared = list(range(16))
    shared_layers = kv_layers(rng, 2, 16)
    engine.store(ns, shared, shared_layers)
    errors = []

    def worker(w):
        local = np.random.default_rng(w)
        for i in range(30):
            tokens = shared + [10000 * (w + 1) + i] * 8
            layers = [[np.concatenate([shared_layers[l][t],
                                       local.standard_normal((1, 2, 8, 8)).astype(np.float32)],
                                      axis=2) for t in range(2)] for l in range(2)]
            engine.store(ns, tokens, layers)
            r = engine.restore(engine.match(ns, tokens))
            try:
                assert r.restored_tokens == 24
                for l in range(2):
                    for t in range(2):
                        np.testing.assert_array_equal(r.layers[l].tensors[t], layers[l][t])
            except AssertionError as e:  # pragma: no cover - reported below
                errors.append(e)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert engine.audit()["ok"]


def test_a_waiting_call_lets_other_python_threads_run(data_dir, rng):
    """A thread waits inside events() (an engine call, through the same
    GIL-releasing wrapper as store and flush) for the next event, up to 60 s;
    meanwhile this thread stores and flushes 64 MiB, the change it wakes on.
    Were the GIL held through the wait, this thread could not run until the
    wait's bound passed and the waiter would get no event: the test fails.
    Nothing is timed (a ticker's rate, once compared here, depended on how
    the loaded machine shared its CPUs); the 60 s only bound a failure."""
    with prefixkv.Engine.open(data_dir=data_dir, hot_bytes=512 << 20, quiet=True) as e:
        ns = e.register_model("big", ["KVCache"] * 4, block_tokens=64, dtype="float16")
        tokens = list(range(64 * 64))
        layers = kv_layers(rng, 4, len(tokens), heads=8, dim=64, dtype=np.float16)
        head = e.event_log_stats()["head_seq"]
        calling = threading.Event()
        got = []

        def waiter():
            it = e.events(head + 1, wait_ms=60_000)
            calling.set()
            got.append(next(it, None))

        t = threading.Thread(target=waiter)
        t.start()
        assert calling.wait(60)
        # The waiter is about to call or in the call; a moment for it to get
        # there (had the store come first, the wait would return at once and
        # the check would be a weaker one, never a false failure).
        time.sleep(0.05)
        e.store(ns, tokens, layers)
        e.flush()
        t.join(120)
        assert not t.is_alive()
        assert got and got[0] is not None, "the waiter got no event: the GIL was held"
        assert got[0]["seq"] == head + 1 and got[0]["kind"] == "stored", got[0]


def test_close_is_not_held_off_by_threads_that_keep_calling(rng):
    """Two threads keep calling events(wait_ms=200), their calls overlapping;
    close() from this thread must not wait for them to stop calling. The
    binding's reader-writer lock prefers readers: with overlapping calls it
    never became free, and close() returned only when the callers gave up (at
    their 20 s bound). Nothing is timed but that bound: the callers stop when
    a call finds the engine closed, and must not have reached it."""
    e = prefixkv.Engine.open(hot_bytes=16 << 20, quiet=True)
    register(e)
    deadline = time.monotonic() + 20
    started = threading.Barrier(3)
    gave_up = []

    def caller(delay):
        started.wait()
        time.sleep(delay)  # staggered, so that the two threads' calls overlap
        seq = e.event_log_stats()["head_seq"] + 1
        while time.monotonic() < deadline:
            try:
                it = e.events(seq, wait_ms=200)
                for _ in it:
                    pass
                seq = it.next_seq
            except prefixkv.InvalidArgument:
                return  # closed
        gave_up.append(delay)

    threads = [threading.Thread(target=caller, args=(d,)) for d in (0, 0.1)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(0.5)
    e.close()
    assert gave_up == [], "close() waited until the callers stopped calling"
    for t in threads:
        t.join()
    assert e.closed


def test_close_pending_while_on_layer_waits_for_another_threads_call(rng):
    """on_layer (inside restore_into's call) waits for a thread that calls the
    engine, while a close() from a third thread is pending. The close waits
    for restore_into, restore_into for on_layer, on_layer for the thread; the
    thread's call must not wait for the close. It did (a pending close gated
    every new call): the three waited for each other forever. Bounded: the
    wait for the thread gives up after 20 s, the restore then returns and
    the close, and then the thread's call, go ahead."""
    e = prefixkv.Engine.open(hot_bytes=16 << 20, quiet=True)
    ns = register(e)
    e.store(ns, list(range(8)), kv_layers(rng, 2, 8))
    dests = [[np.zeros((1, 2, 8, 8), np.float32) for _ in range(2)] for _ in range(2)]
    closer = threading.Thread(target=e.close)
    answered = []

    def on_layer(layer):
        if layer != 0:
            return
        closer.start()
        # close() is pending once the closer waits for this call; a moment
        # for it to get there (were it later, the test would pass without
        # checking anything, never fail falsely).
        time.sleep(0.3)
        caller = threading.Thread(target=lambda: answered.append(e.stats()["hot"]["entries"]))
        caller.start()
        caller.join(20)
        answered.append("joined" if not caller.is_alive() else "still waiting")

    e.restore_into(e.match(ns, list(range(8))), dests, on_layer=on_layer)
    closer.join(60)
    assert not closer.is_alive() and e.closed
    assert answered == [2, "joined"], "a call on_layer waited for waited for the close"


def test_close_ends_a_threads_wait_for_events(rng):
    """A thread tails the event log with a long wait (events(wait_ms=20 s),
    caught up); close() from this thread must end that wait, the tail then
    finding the engine closed. The wait was one call in flight: close()
    waited for it to time out, and the tail stopped as if nothing had
    happened. Bounded by the 20 s wait."""
    e = prefixkv.Engine.open(hot_bytes=16 << 20, quiet=True)
    register(e)
    head = e.event_log_stats()["head_seq"]
    ended = []

    def tail():
        try:
            ended.append(next(e.events(head + 1, wait_ms=20_000), "stopped"))
        except prefixkv.InvalidArgument as error:
            ended.append(str(error))

    waiter = threading.Thread(target=tail)
    waiter.start()
    waiter.join(0.3)  # in its wait (were it not yet, it would find the engine closed)
    e.close()
    waiter.join(30)
    assert e.closed and not waiter.is_alive()
    assert ended and "engine is closed" in ended[0], f"the tail ended with {ended}"


def test_threads_sharing_one_event_iterator_get_each_event_once(rng):
    """Two threads drain one events() iterator. Each page is read without the
    GIL; both threads found the iterator's buffer empty, read the same page
    from the same next_seq, and the second one's page replaced what the
    first had left: events were handed out twice (a consumer applying them
    counted a block twice, or a removal before its store). Every event must
    reach exactly one of the threads. The stores make 6,144 events (six
    pages)."""
    with prefixkv.Engine.open(hot_bytes=256 << 20, quiet=True) as e:
        ns = register(e, block_tokens=4)
        first = e.event_log_stats()["head_seq"] + 1
        for i in range(6):
            tokens = [100_000 * (i + 1) + t for t in range(4096)]
            e.store(ns, tokens, kv_layers(rng, 2, len(tokens), heads=1, dim=2))
        head = e.event_log_stats()["head_seq"]
        it = e.events(first)
        got = [[], []]

        def drain(w):
            for event in it:
                got[w].append(event["seq"])

        threads = [threading.Thread(target=drain, args=(w,)) for w in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        seqs = sorted(got[0] + got[1])
        assert len(seqs) == len(set(seqs)), \
            f"{len(seqs) - len(set(seqs))} events handed to both threads"
        assert seqs == list(range(first, head + 1))
        assert it.next_seq == head + 1


def end_a_program_and_reopen(data_dir, threads, first=""):
    """Runs a program that opens an engine on data_dir, stores 64 tokens in
    16 blocks (kept in RAM for the SSD tier), starts `threads` (the source
    of daemon threads' bodies calling `e`, each calling `calling.wait()` once
    in its call) and ends without closing it. It must exit 0 (within the
    timeout), and a reopen restore all 64 tokens. `first` runs before the
    imports."""
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent(first) + textwrap.dedent(f"""
        import threading
        import time
        import numpy as np
        import prefixkv
        e = prefixkv.Engine.open(data_dir={data_dir!r}, hot_bytes=16 << 20, quiet=True)
        ns = e.register_model("test-model", ["KVCache"] * 2, block_tokens=4, dtype="float32")
        e.store(ns, list(range(64)), [[np.ones((1, 2, 64, 8), np.float32)] * 2] * 2)
        """) + textwrap.dedent(threads) + textwrap.dedent("""
        targets = [f for name, f in list(globals().items()) if name.startswith("thread_")]
        calling = threading.Barrier(len(targets) + 1)
        for target in targets:
            threading.Thread(target=target, daemon=True).start()
        calling.wait()
        time.sleep(0.2)  # all in their calls
        """)
    try:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True,
                             text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError("the program did not end within 30 s")
    assert out.returncode == 0, f"exit {out.returncode}: {out.stderr}"
    with prefixkv.Engine.open(data_dir=data_dir, hot_bytes=16 << 20, quiet=True) as e:
        assert e.match(register(e), list(range(64))).matched_tokens == 64


def test_a_program_ending_while_daemon_threads_call_its_engine_exits_and_keeps_its_blocks(
        data_dir):
    """A program ends while daemon threads still call its engine (a stats
    scraper, an events() tail), the engine never closed. It aborted (SIGABRT,
    'terminate called without an active exception'): Python ends a daemon
    thread taking the GIL back at finalization with pthread_exit, and the
    bindings took it back in a destructor, which may not unwind. And the
    engine, held by the threads' calls, was never collected, hence never
    closed: the 16 blocks stored for the SSD tier, acknowledged, were lost.
    It must exit 0, and a reopen restore them all."""
    end_a_program_and_reopen(data_dir, """
        def thread_scrape():
            calling.wait()
            while True:
                e.stats()
        def thread_tail():
            calling.wait()
            for _ in e.events(wait_ms=60_000):
                pass
        """)


def test_a_program_ending_while_a_daemon_threads_on_layer_waits_for_ever_exits(data_dir):
    """A program ends while a daemon thread's restore_into waits in on_layer
    for ever (for a consumer the program no longer runs: a queue.put(), an
    event). The close at exit waited for that call, so the program never
    ended (killed, its 16 blocks kept in RAM for the SSD tier were lost). It
    must exit 0, the engine flushed, and a reopen restore them all; a close
    and a call after the module's atexit function (on the main thread) must
    not wait."""
    end_a_program_and_reopen(data_dir, """
        def thread_restore():
            dests = [[np.zeros((1, 2, 8, 8), np.float32) for _ in range(2)]
                     for _ in range(2)]
            def on_layer(layer):
                calling.wait()
                threading.Event().wait()
            e.restore_into(e.match(ns, list(range(8))), dests, on_layer=on_layer)
        """, first="""
        import atexit
        def close_after_the_modules_atexit_function():
            e.close()
            try:
                e.stats()
            except prefixkv.Error:
                pass
        atexit.register(close_after_the_modules_atexit_function)
        """)
