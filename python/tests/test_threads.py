"""Threads call one engine in parallel; calls release the GIL."""
import sys
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


def test_a_long_call_lets_other_python_threads_run(data_dir, rng):
    """A ticker thread counts while the main thread stores and flushes 64 MiB.
    Holding the GIL, the call would let it run only around its edges (a switch
    interval of 1 ms each); released, it runs through the whole call."""
    with prefixkv.Engine.open(data_dir=data_dir, hot_bytes=512 << 20, quiet=True) as e:
        ns = e.register_model("big", ["KVCache"] * 4, block_tokens=64, dtype="float16")
        tokens = list(range(64 * 64))
        layers = kv_layers(rng, 4, len(tokens), heads=8, dim=64, dtype=np.float16)
        ticks = [0]
        stop = threading.Event()

        def ticker():
            while not stop.is_set():
                ticks[0] += 1

        interval = sys.getswitchinterval()
        sys.setswitchinterval(0.001)
        t = threading.Thread(target=ticker)
        t.start()
        try:
            start = ticks[0]
            time.sleep(0.05)  # the ticker alone: its free-running rate
            rate = (ticks[0] - start) / 0.05
            before = ticks[0]
            t0 = time.perf_counter()
            e.store(ns, tokens, layers)
            e.flush()
            took = time.perf_counter() - t0
            during = ticks[0] - before
        finally:
            stop.set()
            t.join()
            sys.setswitchinterval(interval)
        print(f"\n[gil] call {took * 1e3:.0f} ms, ticker ran {during / rate * 1e3:.0f} ms "
              f"of it")
        if took > 0.1:
            assert during > rate * 0.02, "the ticker barely ran: the GIL was held"
