"""Starting `prefixkv serve` for a test: on a free loopback port (--port 0,
the port read from its first line), bounded in time, stopped at the end.

Skips the test when PREFIXKV_CLI (set by ctest) does not name the binary or
redis-py is missing."""
import contextlib
import os
import signal
import subprocess
import time

import pytest

START_TIMEOUT_S = 10


@contextlib.contextmanager
def prefixkv_serve(data_dir, *args, env=None):
    """Yields (port, a redis.Redis client) of a `prefixkv serve --data-dir
    data_dir ARGS...` this process runs; SIGTERM (then SIGKILL after 10 s) at
    the end."""
    redis = pytest.importorskip("redis", reason="python3-redis is not installed")
    exe = os.environ.get("PREFIXKV_CLI", "")
    if not os.path.exists(exe):
        pytest.skip("PREFIXKV_CLI does not name the prefixkv binary (ctest sets it)")
    proc = subprocess.Popen([exe, "serve", "--data-dir", str(data_dir), "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, **(env or {})))
    try:
        line = proc.stdout.readline()  # "listening on 127.0.0.1:PORT"
        assert line.startswith("listening on 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                assert time.monotonic() < deadline, f"no PONG on port {port}"
                time.sleep(0.05)
        yield port, client
    finally:
        stop(proc)


def stop(proc):
    """SIGTERM, then SIGKILL if `proc` has not exited within 10 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
