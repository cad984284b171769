"""The Redis dialect real clients use (issue 26): the same redis-py calls
against a real redis-server and against `prefixkv serve`, replies compared.

Both servers are started here on free loopback ports and stopped at the end
(each start bounded by START_TIMEOUT_S). Both have a user "admin" (an ACL user
on redis-server, --admin-pass on prefixkv) so FLUSHDB runs on both. Skipped
with the reason when redis-py, redis-server or the prefixkv binary
(PREFIXKV_CLI, set by ctest) is missing.
"""
import math
import os
import shutil
import socket
import subprocess
import time

import pytest
from servers import stop

redis = pytest.importorskip("redis", reason="python3-redis is not installed")

START_TIMEOUT_S = 10
ADMIN_PASS = "dialect-admin"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_ping(port, deadline, proc, check_pid=True):
    """True once the server `proc` answers PING on `port`, False when `proc` exits
    or `deadline` passes. With check_pid, INFO's process_id must be `proc`'s: a
    port picked free may be taken by another process before `proc` binds it
    (prefixkv, on the port it bound itself, has no process_id)."""
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            # A generous timeout: a reply slower than a second on a loaded
            # machine is no failure (redis-py's TimeoutError is no ConnectionError).
            c = redis.Redis(port=port, socket_timeout=10, socket_connect_timeout=10)
            if c.ping():
                return not check_pid or c.info("server").get("process_id") == proc.pid
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            time.sleep(0.05)
        except redis.exceptions.ResponseError:  # not a server of ours (NOAUTH, ...)
            return False
    return False


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory):
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (Debian package redis-server)")
    for attempt in range(5):  # another process may take the free port first
        port = free_port()
        proc = subprocess.Popen(
            [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
             "no", "--dir", str(tmp_path_factory.mktemp("redis")),
             "--user", "admin", "on", ">" + ADMIN_PASS, "~*", "&*", "+@all"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if wait_for_ping(port, time.monotonic() + START_TIMEOUT_S, proc):
            break
        stop(proc)
    else:
        pytest.fail(f"redis-server did not answer on port {port} (5 ports tried)")
    try:
        yield port
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def prefixkv_port(tmp_path_factory):
    exe = os.environ.get("PREFIXKV_CLI", "")
    if not os.path.exists(exe):
        pytest.skip("PREFIXKV_CLI does not name the prefixkv binary (ctest sets it)")
    env = dict(os.environ, PREFIXKV_ADMIN_PASS=ADMIN_PASS)
    proc = subprocess.Popen(
        [exe, "serve", "--data-dir", str(tmp_path_factory.mktemp("pkv")), "--port", "0",
         "--hot-capacity-bytes", "64M", "--ssd-capacity-bytes", "256M"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    try:
        line = proc.stdout.readline()  # "listening on 127.0.0.1:PORT"
        assert line.startswith("listening on "), line
        port = int(line.rsplit(":", 1)[1])
        assert wait_for_ping(port, time.monotonic() + START_TIMEOUT_S, proc, check_pid=False)
        yield port
    finally:
        stop(proc)


@pytest.fixture
def both(redis_port, prefixkv_port):
    """An admin client of each server, on an empty database."""
    clients = {name: redis.Redis(port=port, username="admin", password=ADMIN_PASS,
                                 socket_timeout=10)
               for name, port in (("redis", redis_port), ("prefixkv", prefixkv_port))}
    for c in clients.values():
        assert c.flushdb() is True
    return clients


def outcome(fn):
    """What a call gave: its value, or its exception's type and text."""
    try:
        return fn()
    except redis.exceptions.RedisError as e:
        return (type(e).__name__, str(e))


def same_on_both(both, fn):
    got = {name: outcome(lambda: fn(c)) for name, c in both.items()}
    assert got["prefixkv"] == got["redis"], got
    return got["redis"]


def ttls_near(got, expected, elapsed):
    """TTL rounds the time left to the nearest second. Right after a deadline n
    seconds away it is n, less the time the commands between took (rounded): up
    to `elapsed`, the seconds the whole run took, long on a loaded machine. A
    deadline from a clock the test read (EXAT, PXAT, ...) is early by up to that
    clock's resolution, `error` seconds (1 for whole seconds). For each i: (n,
    error) of `expected`, a TTL reply got[i] within that window, on either server,
    is replaced by a marker both agree on; a reply outside it stays and differs."""
    for at, (seconds, error) in expected.items():
        lowest = seconds - math.floor(error + elapsed + 0.5)
        if type(got[at]) is int and lowest <= got[at] <= seconds:
            got[at] = ("ttl of about", seconds)


def ABOUT(seconds):  # noqa: N802
    return ("ttl of about", seconds)


@pytest.mark.parametrize("transaction", [True, False])
def test_pipelines_with_and_without_a_transaction(both, transaction):
    def run(c):
        p = c.pipeline(transaction=transaction)
        p.set("a", "1").get("a").mset({"b": "2", "c": "3"}).mget("a", "b", "zz")
        p.delete("a", "zz").exists("a", "b", "b").unlink("c").get("c")
        return p.execute()

    got = same_on_both(both, run)
    assert got == [True, b"1", True, [b"1", b"2", None], 1, 2, 1, None]


def test_a_transaction_with_a_command_refused_when_queued_is_aborted(both):
    def run(c):
        p = c.pipeline(transaction=True)
        p.set("x", "1")
        p.execute_command("GET")  # wrong arity: refused at queue time
        result = outcome(p.execute)
        return result, c.get("x")

    (error, text), value = same_on_both(both, run)
    assert "wrong number of arguments" in text and value is None


def test_an_error_inside_exec_does_not_stop_the_others(both):
    def run(c):
        p = c.pipeline(transaction=True)
        p.set("y", "1").execute_command("PING", "a", "b").get("y")
        replies = p.execute(raise_on_error=False)
        return [(type(r).__name__, str(r)) if isinstance(r, Exception) else r
                for r in replies]

    got = same_on_both(both, run)
    assert got[0] is True and got[2] == b"1" and got[1][0] == "ResponseError"


def test_transaction_commands_out_of_place(both):
    def run(c):
        with c.client() as one:  # one connection: MULTI state is per connection
            seq = [("EXEC",), ("DISCARD",), ("MULTI",), ("MULTI",), ("SET", "k", "v"),
                   ("DISCARD",), ("GET", "k"), ("MULTI",), ("SET", "k", "w"), ("EXEC",),
                   ("UNWATCH",)]
            return [outcome(lambda: one.execute_command(*cmd)) for cmd in seq]

    same_on_both(both, run)


def test_client_name_id_info_and_list(redis_port, prefixkv_port):
    for port in (redis_port, prefixkv_port):
        c = redis.Redis(port=port, client_name="dialect-worker", socket_timeout=10)
        assert c.client_getname() == "dialect-worker"
        assert c.client_setname("renamed") is True
        info = c.client_info()
        assert info["name"] == "renamed" and int(info["id"]) == c.client_id()
        assert any(e["name"] == "renamed" for e in c.client_list())
        with pytest.raises(redis.exceptions.ResponseError, match="cannot contain spaces"):
            c.client_setname("two words")


def test_health_check_pings_before_a_command_on_an_idle_connection(redis_port,
                                                                    prefixkv_port):
    for port in (redis_port, prefixkv_port):
        c = redis.Redis(port=port, health_check_interval=1, socket_timeout=10)
        pings = lambda: c.info("commandstats").get("cmdstat_ping", {}).get("calls", 0)
        before = pings()
        assert c.set("h", "1") is True
        time.sleep(1.2)
        assert c.get("h") == b"1"
        assert pings() > before, port


def test_hello_2_and_3(both):
    def run(c):
        with c.client() as one:
            reply = one.execute_command("HELLO", "2")
            return reply[::2], reply[reply.index(b"proto") + 1]

    fields, proto = same_on_both(both, run)
    assert proto == 2 and b"id" in fields
    with pytest.raises(redis.exceptions.ResponseError, match="NOPROTO|not supported"):
        both["prefixkv"].execute_command("HELLO", "3")


def test_auth_as_default_on_a_server_without_a_password(redis_port, prefixkv_port):
    """Neither server has a requirepass: its default user takes any password
    (Redis's nopass), so a client configured with a username and password
    connects (redis-py sends AUTH default <password>, or HELLO 2 AUTH); prefixkv
    answered WRONGPASS (HELLO) or an error (AUTH). AUTH <password> alone is an
    error and an unknown user WRONGPASS on both."""
    def run(port):
        c = redis.Redis(port=port, username="default", password="anything",
                        socket_timeout=10)
        with c.client() as one:
            return (c.ping(), c.set("auth-default", "1"), c.get("auth-default"),
                    one.execute_command("HELLO", "2", "AUTH", "default", "x")[2],
                    outcome(lambda: one.execute_command("AUTH", "x")),
                    outcome(lambda: one.execute_command("AUTH", "nobody", "x")),
                    one.execute_command("AUTH", "default", "y"))

    got = {name: run(port) for name, port in (("redis", redis_port),
                                               ("prefixkv", prefixkv_port))}
    assert got["redis"][:3] == got["prefixkv"][:3] == (True, True, b"1"), got
    assert got["redis"][3] == got["prefixkv"][3] == b"version", got
    for at in (4, 5):
        assert got["redis"][at][0] == got["prefixkv"][at][0], got
    assert "without any password" in got["prefixkv"][4][1], got
    assert "invalid username-password" in got["redis"][5][1], got
    assert got["prefixkv"][5][1] == got["redis"][5][1], got
    assert got["redis"][6] == got["prefixkv"][6], got


def test_config_get_takes_globs(both):
    """CONFIG GET's arguments are globs, matched without case, each parameter
    listed once (prefixkv compared names exactly: `CONFIG GET *` listed none)."""
    def run(c):
        several = c.execute_command("CONFIG", "GET", "save", "s?ve", "appendonly")
        # In no order (Redis's dict's); each once.
        return (c.config_get("appendon*"), c.config_get("SAV?"), len(several),
                dict(zip(several[::2], several[1::2])))

    got = same_on_both(both, run)
    assert got[0] == {"appendonly": "no"} and got[1] == {"save": ""}, got
    everything = both["prefixkv"].config_get("*")
    assert {"save", "appendonly", "databases"} <= set(everything), everything


def test_dbsize_and_flushes(both):
    def run(c):
        c.mset({"k1": "a", "k2": "b", "k3": "c"})
        counts = [c.dbsize()]
        c.delete("k1")
        counts.append(c.dbsize())
        return counts, c.flushdb(), c.dbsize(), c.set("k4", "d"), c.flushall(), c.dbsize()

    assert same_on_both(both, run) == ([3, 2], True, 0, True, True, 0)


def test_flushdb_needs_the_admin_user_on_prefixkv(prefixkv_port):
    c = redis.Redis(port=prefixkv_port, socket_timeout=10)
    with pytest.raises(redis.exceptions.ResponseError, match="admin command"):
        c.flushdb()


def test_ttl_and_type_of_keys_without_expiry(both):
    def run(c):
        c.set("t", "1")
        return (c.ttl("t"), c.pttl("t"), c.ttl("none"), c.pttl("none"), c.persist("t"),
                c.type("t"), c.type("none"))

    assert same_on_both(both, run) == (-1, -1, -2, -2, False, b"string", b"none")


def test_set_options(both):
    def run(c):
        start = time.monotonic()
        got = [outcome(lambda: c.execute_command(*cmd)) for cmd in [
            ("SET", "s", "1", "XX"), ("SET", "s", "1", "NX"), ("SET", "s", "2", "NX"),
            ("SET", "s", "2", "NX", "GET"), ("SET", "s", "3", "XX", "GET", "EX", "100"),
            ("TTL", "s"), ("SET", "s", "4", "KEEPTTL"), ("TTL", "s"), ("SET", "s", "5"),
            ("TTL", "s"), ("SET", "s", "6", "PX", "100000"), ("TTL", "s"),
            ("SET", "s", "7", "EXAT", str(int(time.time()) + 200)), ("TTL", "s"),
            ("SET", "s", "8", "PXAT", str(int(time.time() * 1000) + 300000)), ("TTL", "s"),
            ("SET", "n", "v", "GET"), ("GET", "n"), ("GET", "s"),
            ("SET", "s", "v", "NX", "XX"), ("SET", "s", "v", "EX", "1", "PX", "5"),
            ("SET", "s", "v", "EX", "1", "KEEPTTL"), ("SET", "s", "v", "EX"),
            ("SET", "s", "v", "EX", "ten"), ("SET", "s", "v", "EX", "0"),
            ("SET", "s", "v", "PX", "-5"), ("SET", "s", "v", "FOREVER"), ("GET", "s")]]
        ttls_near(got, {5: (100, 0), 7: (100, 0), 11: (100, 0), 13: (200, 1),
                        15: (300, 0.001)}, time.monotonic() - start)
        return got

    got = same_on_both(both, run)
    assert got[1] is True and got[2] is None and got[-1] == b"8"
    assert [got[i] for i in (5, 7, 9, 11, 13, 15)] == [
        ABOUT(100), ABOUT(100), -1, ABOUT(100), ABOUT(200), ABOUT(300)]


def test_set_options_given_twice(both):
    """An option given twice takes its last value, and every option is read
    before the time's number is checked (a syntax error wins over it)."""
    def run(c):
        start = time.monotonic()
        got = [outcome(lambda: c.execute_command(*cmd)) for cmd in [
            ("SET", "r", "1", "EX", "100", "EX", "200"), ("TTL", "r"),
            ("SET", "r", "2", "KEEPTTL", "KEEPTTL"), ("TTL", "r"),
            ("SET", "r", "3", "XX", "XX"), ("SET", "r", "4", "NX", "NX"),
            ("SET", "r", "5", "PX", "ten", "PX", "300000"), ("TTL", "r"),
            ("SET", "r", "v", "EX", "100", "EX", "0"), ("SET", "r", "v", "EX", "ten", "NX", "XX"),
            ("SET", "r", "v", "EX", "0", "FOREVER"), ("GET", "r")]]
        ttls_near(got, {1: (200, 0), 3: (200, 0), 7: (300, 0)}, time.monotonic() - start)
        return got

    got = same_on_both(both, run)
    assert got[0] is True and got[5] is None and got[-1] == b"5"


def test_integer_arguments_are_read_as_redis_reads_them(both):
    """An integer argument is an optional '-' and digits without a leading zero
    (Redis's string2ll): "01", "-0", "00" and "+5" are refused with Redis's
    error text, not read as numbers (SET PX 01 answered OK, XRANGE COUNT -0 an
    empty page). SCAN's cursor is read by strtoul and takes them."""
    def run(c):
        return [outcome(lambda: c.execute_command(*cmd)) for cmd in [
            ("SET", "i", "v", "PX", "01"), ("SET", "i", "v", "EX", "-0"),
            ("SET", "i", "v", "EX", "+5"), ("SET", "i", "v", "EXAT", "00"),
            ("SET", "i", "v", "PXAT", "-01"), ("GET", "i"), ("SET", "i", "v"),
            ("EXPIRE", "i", "01"), ("PEXPIRE", "i", "-0"), ("EXPIREAT", "i", "+9"),
            ("PEXPIREAT", "i", "007"), ("TTL", "i"),
            ("XRANGE", "prefixkv:events", "-", "+", "COUNT", "-0"),
            ("XREVRANGE", "prefixkv:events", "+", "-", "COUNT", "01"),
            ("XREAD", "COUNT", "01", "STREAMS", "prefixkv:events", "0"),
            ("XREAD", "BLOCK", "-0", "STREAMS", "prefixkv:events", "$"),
            ("XREAD", "BLOCK", "-1", "STREAMS", "prefixkv:events", "$"),
            ("SCAN", "0", "COUNT", "010"), ("SCAN", "0", "COUNT", "-0"),
            ("SELECT", "00"), ("SELECT", "-0"), ("SELECT", "01"), ("SCAN", "00")]]

    got = same_on_both(both, run)
    assert got[6] is True and got[11] == -1 and got[-1] == (0, [b"i"])


def test_expire_family_and_persist(both):
    def run(c):
        c.mset({"e": "1", "f": "2", "g": "3"})
        start = time.monotonic()
        now = int(time.time())
        got = [outcome(lambda: c.execute_command(*cmd)) for cmd in [
            ("EXPIRE", "e", "100"), ("TTL", "e"), ("EXPIRE", "e", "50", "GT"),
            ("EXPIRE", "e", "200", "GT"), ("TTL", "e"), ("EXPIRE", "e", "300", "LT"),
            ("EXPIRE", "e", "60", "LT"), ("TTL", "e"), ("EXPIRE", "e", "70", "NX"),
            ("EXPIRE", "f", "70", "XX"), ("EXPIRE", "f", "70", "LT"), ("TTL", "f"),
            ("EXPIRE", "g", "80", "XX", "LT"), ("EXPIRE", "g", "80", "GT"),
            ("PEXPIRE", "g", "90000"), ("TTL", "g"), ("EXPIREAT", "g", str(now + 400)),
            ("TTL", "g"), ("PEXPIREAT", "g", str((now + 500) * 1000)), ("TTL", "g"),
            ("PERSIST", "g"), ("PERSIST", "g"), ("TTL", "g"), ("EXPIRE", "absent", "10"),
            ("PERSIST", "absent"), ("EXPIRE", "g", "-1"), ("EXISTS", "g"),
            ("EXPIREAT", "f", "1"), ("GET", "f"), ("EXPIRE", "e", "x"),
            ("EXPIRE", "e", "10", "NX", "XX"), ("EXPIRE", "e", "10", "GT", "LT"),
            ("EXPIRE", "e", "10", "SOON"), ("EXPIRE", "e", "9223372036854775807"),
            ("PEXPIRE", "e", "9223372036854775807")]]
        ttls_near(got, {1: (100, 0), 4: (200, 0), 7: (60, 0), 11: (70, 0), 15: (90, 0),
                        17: (400, 1), 19: (500, 1)}, time.monotonic() - start)
        return got

    got = same_on_both(both, run)
    assert got[0] == 1 and got[2] == 0 and got[-9] == 0
    assert [got[i] for i in (1, 4, 7, 11, 15, 17, 19, 22)] == [
        ABOUT(100), ABOUT(200), ABOUT(60), ABOUT(70), ABOUT(90), ABOUT(400), ABOUT(500), -1]


def test_expired_keys_are_gone(both):
    def run(c):
        c.set("short", "1", px=150)
        c.set("long", "2", ex=100)
        c.pexpire("long", 150)
        time.sleep(0.3)
        return (c.get("short"), c.exists("short", "long"), c.ttl("short"), c.pttl("long"),
                c.type("short"), c.delete("long"), c.set("short", "3", nx=True))

    assert same_on_both(both, run) == (None, 0, -2, -2, b"none", 0, True)


def test_scan_match_count_type_and_keys(both):
    names = [f"model@{i % 3}@{i:04x}" for i in range(40)] + ["other", "h[a]llo", "a*b"]

    def run(c):
        c.mset({n: n for n in names})
        walks = {}
        for match, count in [(None, 5), ("model@1@*", 7), ("model@?@00[0-1]?", 100),
                             ("h\\[a]llo", 10), ("a\\*b", 10), ("zz*", 3)]:
            walks[(match, count)] = sorted(c.scan_iter(match=match, count=count))
        typed = (sorted(c.scan_iter(count=1000, _type="string")),
                 sorted(c.scan_iter(count=1000, _type="hash")))
        errors = [outcome(lambda: c.execute_command(*cmd)) for cmd in [
            ("SCAN", "x"), ("SCAN", "0", "COUNT", "0"), ("SCAN", "0", "COUNT"),
            ("SCAN", "0", "COUNT", "many"), ("SCAN", "0", "LIMIT", "3")]]
        return walks, typed, sorted(c.keys("model@2@*")), sorted(c.keys("*")), errors

    walks, typed, keys2, keys, _ = same_on_both(both, run)
    assert len(walks[(None, 5)]) == len(names) and len(keys2) == 13
    assert typed[1] == [] and len(typed[0]) == len(names) and len(keys) == len(names)


def test_scan_cursors_are_read_as_redis_reads_them(both):
    """Redis reads SCAN's cursor with strtoul: a sign, leading zeros, the empty
    text and text after a NUL are taken ("-1" is 2^64 - 1); a leading space,
    junk or a value past 2^64 - 1 are 'invalid cursor'. Which keys a non-zero
    cursor returns is each server's own, so those are walked on an empty
    database."""
    def run(c):
        empty = [outcome(lambda: c.execute_command("SCAN", cursor)) for cursor in [
            "-1", "18446744073709551615", "-18446744073709551615", " 0", "0 ", "-",
            "+", "+-1", "0x1", "18446744073709551616", "-18446744073709551616"]]
        c.set("k", "v")
        return empty, [outcome(lambda: c.execute_command("SCAN", cursor))
                       for cursor in ["+0", "-0", "", "00", "0\x00x"]]

    empty, one = same_on_both(both, run)
    assert empty[0] == (0, []) and one == [(0, [b"k"])] * 5


def test_stream_ids_are_read_as_redis_reads_them(both):
    """Stream IDs are read before the stream is looked up, so a redis-server
    without prefixkv:events answers the same errors: a part is read by
    string2ull ("+1", " 1", "001", "1--0" are IDs), an exclusive bound's ID is
    strict ("(-", "(+" are not), an exclusive start past the largest ID or end
    before the least is its own error, and XREAD's ID is strict. Entries
    differ (Redis's stream is empty), so IDs taken are compared as taken."""
    def run(c):
        got = []
        for cmd in [("XRANGE", "+1", "+"), ("XRANGE", "-", " 1"), ("XRANGE", "001", "1--0"),
                    ("XREVRANGE", "+", "1-+0"), ("XRANGE", "(-", "+"), ("XRANGE", "-", "(+"),
                    ("XREVRANGE", "(+", "-"), ("XRANGE", "-", "(0-0"),
                    ("XRANGE", "(18446744073709551615-18446744073709551615", "+"),
                    ("XRANGE", "-5", "+"), ("XRANGE", "1-", "+"), ("XRANGE", "1-*", "+"),
                    ("XRANGE", "(", "+"), ("XRANGE", "(-", "x", "COUNT", "y")]:
            r = outcome(lambda: c.execute_command(cmd[0], "prefixkv:events", *cmd[1:]))
            got.append(r if isinstance(r, tuple) else "taken")
        for last in ["+0", " 0", "-", "+", "0-", "1 "]:
            r = outcome(lambda: c.execute_command("XREAD", "COUNT", 1, "STREAMS",
                                                  "prefixkv:events", last))
            got.append(r if isinstance(r, tuple) else "taken")
        return got

    got = same_on_both(both, run)
    assert got[:4] == ["taken"] * 4 and got[-6:-4] == ["taken"] * 2


def test_expiretime_and_pexpiretime(both):
    """Redis 7's deadline of a key as a Unix time: seconds rounded, -1 without
    expiry, -2 for a missing key."""
    at_ms = (int(time.time()) + 1000) * 1000 + 500

    def run(c):
        c.set("t", "1", pxat=at_ms)
        c.set("u", "2", pxat=at_ms - 1)
        c.set("p", "3")
        return [outcome(lambda: c.execute_command(*cmd)) for cmd in [
            ("EXPIRETIME", "t"), ("PEXPIRETIME", "t"), ("EXPIRETIME", "u"),
            ("EXPIRETIME", "p"), ("PEXPIRETIME", "p"), ("EXPIRETIME", "missing"),
            ("PEXPIRETIME", "missing"), ("EXPIRETIME",), ("EXPIRETIME", "t", "u")]]

    got = same_on_both(both, run)
    assert got[:7] == [at_ms // 1000 + 1, at_ms, at_ms // 1000, -1, -1, -2, -2]


def test_total_commands_processed_counts_as_redis_counts(both):
    """INFO's total_commands_processed counts the commands that ran (EXEC and
    the commands it ran, an aborted EXEC, a failed call), not those refused
    before running (unknown, wrong arity) nor those MULTI only queued."""
    def run(c):
        before = c.info("stats")["total_commands_processed"]
        for cmd in [("NOSUCH",), ("GET",), ("GET", "a", "b"), ("SET", "k", "v", "PX", "01"),
                    ("GET", "k")]:
            outcome(lambda: c.execute_command(*cmd))
        p = c.pipeline()
        p.set("x", 1).get("x").execute()
        c.pipeline(transaction=False).get("x").execute()
        return c.info("stats")["total_commands_processed"] - before

    assert same_on_both(both, run) == 8  # INFO, SET, GET, MULTI, EXEC, SET, GET, GET


def test_the_empty_name_under_patterns_of_stars(both):
    """Redis's glob never matches the empty name but with "" or "*" alone (KEYS
    and SCAN take "*" as every key): "**" lists only the others."""
    def run(c):
        c.mset({"": "1", "a": "2"})
        return [(sorted(c.keys(p)), sorted(c.scan(0, match=p, count=100)[1]))
                for p in ["*", "**", "***", "", "?*"]]

    got = same_on_both(both, run)
    assert got[1] == ([b"a"], [b"a"]) and got[0] == ([b"", b"a"], [b"", b"a"])


def test_unknown_command_errors_list_the_arguments_as_redis_does(both):
    """Redis lists every argument while the list is under 128 bytes (the last
    cut to fit), each up to a NUL, CR and LF as spaces, and the name cut at 128."""
    def run(c):
        return [outcome(lambda: c.execute_command(*cmd)) for cmd in [
            ("FOO", "a", "b", "c", "d", "e"), ("FOO", "x" * 200, "y"),
            ("FOO", "x" * 120, "y" * 12, "z"), ("FOO", "\x00x", "a\r\nb"), ("N" * 200,)]]

    got = same_on_both(both, run)
    assert got[0][1].endswith("'a' 'b' 'c' 'd' 'e' ")


def test_inline_commands_are_split_as_redis_splits_them(both, redis_port, prefixkv_port):
    """A line typed at a terminal (telnet, a script's printf) is split as Redis
    splits it: quotes group words and are not stored, with Redis's escapes, and
    unbalanced quotes are a protocol error that closes the connection. prefixkv
    took quotes as bytes: `SET k "v"` stored "v" with its quotes."""
    lines = [b'SET inline:a "a b"', b'SET inline:b "v"', b"ECHO 'it\\'s'",
             b'ECHO "\\x41\\n\\"\\\\"', b'ECHO a"b c"', b'ECHO "" x', b'SET inline:c "open',
             b"PING"]

    def run(port):
        conn = redis.Connection(port=port, socket_timeout=10)
        try:
            conn.send_packed_command([b"".join(line + b"\r\n" for line in lines)])
            replies = [outcome(conn.read_response) for _ in lines]
        finally:
            conn.disconnect()
        c = redis.Redis(port=port, socket_timeout=10)
        return replies, c.mget("inline:a", "inline:b", "inline:c")

    got = {name: run(port) for name, port in (("redis", redis_port),
                                              ("prefixkv", prefixkv_port))}
    assert got["prefixkv"] == got["redis"], got
    replies, values = got["redis"]
    assert values == [b"a b", b"v", None] and replies[2] == b"it's"
