"""Blocks survive close() and come back from SSD after a reopen."""
import gc

import numpy as np
import pytest

import prefixkv
from conftest import kv_layers, register


def test_a_reopened_engine_restores_from_ssd(data_dir, rng):
    tokens = list(range(24))
    layers = kv_layers(rng, 2, len(tokens), dtype=np.float16)
    with prefixkv.Engine.open(data_dir=data_dir, hot_bytes=1 << 20, quiet=True) as e:
        e.store(register(e, dtype="float16"), tokens, layers)
    with prefixkv.Engine.open(data_dir=data_dir, hot_bytes=1 << 20, quiet=True) as e:
        ns = register(e, dtype="float16")
        m = e.match(ns, tokens)
        assert m.tiers == ["ssd"] * 6
        r = e.restore(m)
        assert (r.restored_tokens, r.blocks_from_ssd) == (24, 6)
        for got, want in zip(r.layers, layers):
            for g, w in zip(got.tensors, want):
                np.testing.assert_array_equal(g, w)
        # Promoted on the read: the per-block views are pinned hot copies.
        assert [b.level for b in r.blocks] == ["hot"] * 6
        assert e.match(ns, tokens).tiers == ["hot"] * 6
        del r, m
        gc.collect()
        assert e.audit()["ok"]


def test_without_a_hot_tier_blocks_are_unpinned_ssd_reads(data_dir, rng):
    with prefixkv.Engine.open(data_dir=data_dir, hot_bytes=0, quiet=True) as e:
        ns = register(e)
        layers = kv_layers(rng, 2, 8)
        e.store(ns, list(range(8)), layers)
        r = e.restore(e.match(ns, list(range(8))))
        assert [(b.level, b.pinned) for b in r.blocks] == [("ssd", False)] * 2
        np.testing.assert_array_equal(r.blocks[1].layers[0].tensors[0], layers[0][0][:, :, 4:])


def test_explain_miss_names_the_field_a_restarted_spec_differs_in(data_dir, rng):
    """Fail-closed namespaces: a spec that differs in one field (here the
    tokenizer hash) is another namespace, and explain_miss names the field."""
    tokens = list(range(12))
    with prefixkv.Engine.open(data_dir=data_dir, hot_bytes=1 << 20, quiet=True) as e:
        ns = register(e, tokenizer_hash="abc", layer_shapes=["2x8", "2x8"])
        e.store(ns, tokens, kv_layers(rng, 2, len(tokens)))
    with prefixkv.Engine.open(data_dir=data_dir, hot_bytes=1 << 20, quiet=True) as e:
        asked = register(e, tokenizer_hash="def", layer_shapes=["2x8", "2x8"])
        assert e.match(asked, tokens).matched_tokens == 0
        m = e.explain_miss(tokens, asked)
        assert m["kind"] == "other-namespace", m["reason"]
        assert m["first_missed_block"] == 0
        assert [d["text"] for d in m["differences"]] == [
            "tokenizer hash differs: stored abc, asked def"]
        # The same spec through keywords, unregistered: it hits.
        hit = e.explain_miss(tokens, model="test-model", layer_types=["KVCache"] * 2,
                             block_tokens=4, dtype="float32", tokenizer_hash="abc",
                             layer_shapes=["2x8", "2x8"])
        assert (hit["kind"], hit["restorable_tokens"]) == ("none", 12), hit["reason"]
        never = e.explain_miss(list(range(100, 108)), asked, tokenizer_hash="abc")
        assert never["kind"] == "never-stored", never["reason"]
        # No remote tier: nothing looked up there.
        assert (never["remote_blocks"], never["restorable_with_remote_tokens"]) == (0, 0)
        with pytest.raises(TypeError):
            e.explain_miss(tokens, asked, colour="red")
        with pytest.raises(prefixkv.errors.InvalidArgument):
            e.explain_miss(tokens, asked, layer_shapes=["2y8", "2x8"])


def test_a_forked_child_neither_uses_nor_closes_its_parents_engine(data_dir, rng):
    """A process forked while an engine is open (a preloading server's
    workers, os.fork) holds a copy of the engine object but none of its
    threads, and its files are the parent's. The child's calls are refused,
    and its close() and garbage collection of the engine let go of it: the
    collection closed it, writing the parent's queued blocks into the
    parent's directory from the child (which then crashed), and the
    parent's next write found its segment file taken ("File exists")."""
    import os
    import time
    e = prefixkv.Engine.open(data_dir=data_dir, hot_bytes=1 << 20, quiet=True)
    ns = register(e)
    stored = {}
    for i in range(50):  # more than the hot tier holds: a write-back queue
        tokens = list(range(100 * i, 100 * i + 16))
        stored[tuple(tokens)] = kv_layers(rng, 2, 16)
        e.store(ns, tokens, stored[tuple(tokens)])
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read)
            try:
                e.stats()
                said = b"stats served"
            except prefixkv.InvalidArgument as error:
                said = b"refused" if b"fork" in str(error).encode() else str(error).encode()
            e.close()
            said += b" closed" if e.closed else b" open"
            del e
            gc.collect()
            os.write(write, said)
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    deadline = time.monotonic() + 30
    while (status := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if status[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    said = os.read(read, 4096)
    os.close(read)
    assert status[0] == pid and status[1] == 0, f"the child ended with {status}: {said}"
    assert said == b"refused closed", said
    tokens = list(range(10000, 10016))
    stored[tuple(tokens)] = kv_layers(rng, 2, 16)
    e.store(ns, tokens, stored[tuple(tokens)])
    e.flush()
    assert e.audit()["ok"]
    e.close()
    with prefixkv.Engine.open(data_dir=data_dir, hot_bytes=1 << 20, quiet=True) as again:
        ns = register(again)
        for tokens, layers in stored.items():
            r = again.restore(again.match(ns, list(tokens)))
            assert r.restored_tokens == 16
            np.testing.assert_array_equal(r.layers[1].tensors[1], layers[1][1])
        assert again.audit()["ok"]



def run_forks(data_dir, child, *, before="", forks=1, deadline_s=10):
    """Runs, in a fresh interpreter (a forked pytest must not go on running
    the suite), a parent that opens an engine in `data_dir` (None: RAM only),
    stores a prompt, runs `before` (Python source with `data_dir`, `e`,
    `ns`, `tokens` and `layers` defined; threads it starts, in `threads`, end when `stop`
    is set) and forks `forks` children, each running `child` (the same
    names) and then ending as a script ends. The parent waits `deadline_s`
    for them and prints each one's exit status, or 'hung' (it then kills
    it). Returns (the statuses, the children's output)."""
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent(f"""
        import gc, os, sys, threading, time
        import numpy as np
        import prefixkv
        data_dir = {data_dir!r}
        e = prefixkv.Engine.open(data_dir=data_dir, hot_bytes=8 << 20, quiet=True)
        ns = e.register_model("test-model", ["KVCache"] * 2, block_tokens=4,
                              dtype="float32")
        tokens = list(range(16))
        layers = [[np.full((1, 2, 16, 8), 10 * l + t, np.float32) for t in range(2)]
                  for l in range(2)]
        e.store(ns, tokens, layers)
        """) + textwrap.dedent(before) + textwrap.dedent(f"""
        read, write = os.pipe()
        pids = []
        for _ in range({forks}):
            pid = os.fork()
            if pid == 0:
                os.close(read)
                os.dup2(write, 1)
                exec(compile({textwrap.dedent(child)!r}, "child", "exec"))
                sys.exit(0)
            pids.append(pid)
        os.close(write)
        stop = True
        for thread in globals().get("threads", []):
            thread.join()
        deadline = time.monotonic() + {deadline_s}
        status = dict.fromkeys(pids, "hung")
        while "hung" in status.values() and time.monotonic() < deadline:
            for pid in [p for p, s in status.items() if s == "hung"]:
                got, raw = os.waitpid(pid, os.WNOHANG)
                if got:
                    status[pid] = f"exit {{os.waitstatus_to_exitcode(raw)}}"
            time.sleep(0.01)
        for pid in [p for p, s in status.items() if s == "hung"]:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        said = os.read(read, 1 << 16).decode()
        print(",".join(status.values()))
        print(said, end="")
        """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=deadline_s + 60)
    assert out.returncode == 0, out.stderr
    status, _, said = out.stdout.partition("\n")
    return status.split(","), said


def test_a_forked_child_that_exits_normally_ends(data_dir):
    """A child forked while an engine is open that ends as a Python program
    ends (sys.exit, the end of its script: a preloading server's worker)
    hung for ever in RocksDB's static destructors (a timer's condition
    variable the parent's thread was waiting on), so its parent's wait for
    it never returned. It now ends with its status, its output written."""
    status, said = run_forks(data_dir, """
        print("child ran")
        sys.exit(3)
        """)
    assert (status, said) == (["exit 3"], "child ran\n")


def test_a_forked_child_never_waits_for_its_parents_engine_locks():
    """A child forked while threads of the parent use the engine (their
    calls run without the GIL) may start with one of the engine's locks
    held for ever: the memory arena's, the hot budget's. restore_into asked
    every engine's memory for its regions (the parent's too, for its own
    engine's restores as well), and dropping a restore, a plan or an array
    of the parent's unpinned blocks and freed memory: each took such a lock,
    and one child in fifteen or so hung. The parent's engine is refused at
    once, its objects let go of without a release."""
    status, said = run_forks(None, """
        # One write per line: print writes the text and its newline apart,
        # and forty children share the pipe (two ended "refusedrefused").
        try:
            e.restore_into(m, [[np.zeros_like(t) for t in pair] for pair in layers])
            said = "restored"
        except prefixkv.InvalidArgument as error:
            said = "refused" if "forked" in str(error) else str(error)
        os.write(1, (said + "\\n").encode())
        del restored, array, plan
        gc.collect()
        os._exit(0)
        """, before="""
        m = e.match(ns, tokens)
        restored, plan = e.restore(m), e.plan_restore(m)
        array = e.restore(m).blocks[0].layers[0].tensors[0]
        stop = False
        def churn(call):  # many small allocations and lookups of regions
            i = 1
            while not stop:
                call(i)
                i += 1
        threads = [threading.Thread(target=churn, args=(call,)) for call in (
            lambda i: e.store(ns, list(range(64 * i, 64 * i + 64)),
                              [[np.ones((1, 1, 64, 1), np.float32)] * 2] * 2),
            lambda i: e.memory_regions())]
        for t in threads:
            t.start()
        time.sleep(0.05)
        """, forks=40, deadline_s=5)
    ended = {s: status.count(s) for s in status}
    assert ended == {"exit 0": 40}, f"the children's ends: {ended}"
    assert said == "refused\n" * 40, said


def test_a_forked_child_opens_only_ram_only_engines(data_dir):
    """RocksDB keeps one set of background threads (flushes, compactions)
    per process, started by the first engine with a data directory and kept
    after it closed; a forked child has none of them, yet its RocksDB thinks
    it has: an engine with a data directory opened there waited for ever for
    its first flush (its close() never returned). Such an open is refused;
    a RAM-only engine works there."""
    status, said = run_forks(data_dir, """
        import os.path
        try:
            c = prefixkv.Engine.open(data_dir=os.path.join(data_dir, "child"), quiet=True)
            c.store(c.register_model("test-model", ["KVCache"] * 2, block_tokens=4,
                                     dtype="float32"), tokens, layers)
            c.close()
            print("opened and closed")
        except prefixkv.NotSupported as error:
            print("refused" if "forked" in str(error) else str(error))
        with prefixkv.Engine.open(hot_bytes=1 << 20, quiet=True) as c:
            cns = c.register_model("test-model", ["KVCache"] * 2, block_tokens=4,
                                   dtype="float32")
            c.store(cns, tokens, layers)
            print(c.restore(c.match(cns, tokens)).restored_tokens)
        os._exit(0)
        """, before="e.close()", deadline_s=5)
    assert (status, said) == (["exit 0"], "refused\n16\n")
