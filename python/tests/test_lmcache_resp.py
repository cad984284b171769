"""LMCache's RESP storage adapter, byte for byte, against a real `prefixkv serve`
(docs/integrations.md; issue 26).

The adapter keeps one blocking connection per worker and reads fixed replies:
`AUTH pass` / `AUTH user pass` expect exactly `+OK\\r\\n`; `SET key <chunk>`
reads exactly the 5 bytes `+OK\\r\\n`; `GET` expects `$<len>\\r\\n` + bytes +
`\\r\\n`, or `$-1\\r\\n`; single-key `EXISTS` / `DEL` read exactly `:0\\r\\n` or
`:1\\r\\n`. Keys look like `model@rank@hash`, chunks are 1-32 MiB. This client
speaks that framing over a raw socket and checks every byte, with a hot tier
smaller than the data (the chunks spill to SSD) and across a restart of serve.
Skipped when PREFIXKV_CLI (set by ctest) does not name the prefixkv binary.
"""
import os
import random
import signal
import socket
import subprocess
import time

import pytest

PASSWORD = "lmcache-pass"
MIB = 1 << 20
START_TIMEOUT_S = 10
SEED = int(os.environ.get("PREFIXKV_SEED", random.randrange(1 << 32)))
print(f"[seed] test_lmcache_resp: PREFIXKV_SEED={SEED}")


class Serve:
    """`prefixkv serve` on a free loopback port over `data_dir`, 8 MiB of RAM."""

    def __init__(self, data_dir):
        exe = os.environ.get("PREFIXKV_CLI", "")
        if not os.path.exists(exe):
            pytest.skip("PREFIXKV_CLI does not name the prefixkv binary (ctest sets it)")
        self.proc = subprocess.Popen(
            [exe, "serve", "--data-dir", str(data_dir), "--port", "0",
             "--hot-capacity-bytes", "8M", "--ssd-capacity-bytes", "512M",
             "--max-request-bytes", "64M"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env=dict(os.environ, PREFIXKV_REQUIREPASS=PASSWORD))
        line = self.proc.stdout.readline()  # "listening on 127.0.0.1:PORT"
        assert line.startswith("listening on "), line
        self.port = int(line.rsplit(":", 1)[1])

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)  # a clean shutdown writes RAM back
        try:
            assert self.proc.wait(timeout=30) == 0
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


class AdapterConnection:
    """One blocking connection framed as LMCache's RESP adapter frames it."""

    def __init__(self, port):
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def command(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else a.encode()
            out += [b"$%d\r\n" % len(a), a, b"\r\n"]
        self.sock.sendall(b"".join(out))

    def read_exactly(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 4 * MIB))
            assert chunk, "the server closed the connection"
            buf += chunk
        return bytes(buf)

    def read_line(self):
        line = bytearray()
        while not line.endswith(b"\r\n"):
            line += self.read_exactly(1)
        return bytes(line)

    def expect(self, reply, *args):
        self.command(*args)
        assert self.read_exactly(len(reply)) == reply, args[0]

    def get(self, key):
        self.command("GET", key)
        header = self.read_line()
        if header == b"$-1\r\n":
            return None
        assert header.startswith(b"$"), header
        body = self.read_exactly(int(header[1:-2]) + 2)
        assert body.endswith(b"\r\n")
        return body[:-2]

    def close(self):
        self.sock.close()


def chunks():
    """Keys model@rank@hash with 1, 4 and 32 MiB chunks (and more 4 MiB ones)."""
    rng = random.Random(SEED)
    sizes = [1 * MIB, 4 * MIB, 32 * MIB, 4 * MIB, 4 * MIB]
    return {f"llama-3-8b@{rank}@{rng.getrandbits(64):016x}": rng.randbytes(size)
            for rank, size in enumerate(sizes)}


def test_the_lmcache_resp_adapter_framing_spill_and_restart(tmp_path):
    data = chunks()
    serve = Serve(tmp_path / "pkv")
    try:
        c = AdapterConnection(serve.port)
        c.expect(b"+OK\r\n", "AUTH", PASSWORD)
        c.expect(b"+OK\r\n", "AUTH", "default", PASSWORD)
        for key, chunk in data.items():
            c.expect(b"+OK\r\n", "SET", key, chunk)
        for key, chunk in data.items():  # 45 MiB through an 8 MiB hot tier
            assert c.get(key) == chunk, key
            c.expect(b":1\r\n", "EXISTS", key)
        missing = "llama-3-8b@0@ffffffffffffffff"
        assert c.get(missing) is None
        c.expect(b":0\r\n", "EXISTS", missing)
        c.expect(b":0\r\n", "DEL", missing)
        gone = next(iter(data))
        c.expect(b":1\r\n", "DEL", gone)
        c.expect(b":0\r\n", "DEL", gone)
        assert c.get(gone) is None
        del data[gone]
        c.command("INFO", "keyspace")
        header = c.read_line()  # a bulk string
        text = c.read_exactly(int(header[1:-2]) + 2).decode()
        ssd = int(text.split("raw_keys_ssd:")[1].split("\r\n")[0])
        assert ssd >= 1, "the chunks did not spill to SSD: " + text
        c.close()
    finally:
        serve.stop()

    serve = Serve(tmp_path / "pkv")  # the same data directory
    try:
        c = AdapterConnection(serve.port)
        c.expect(b"-NOAUTH Authentication required.\r\n", "GET", "k")
        c.expect(b"+OK\r\n", "AUTH", "default", PASSWORD)
        for key, chunk in data.items():
            assert c.get(key) == chunk, key
            c.expect(b":1\r\n", "EXISTS", key)
        assert c.get(gone) is None
        c.expect(b":0\r\n", "EXISTS", gone)
        c.close()
    finally:
        serve.stop()
