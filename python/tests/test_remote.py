"""The remote tier from Python: an engine whose cluster is down opens and works
locally, says so in stats(), and a bad cluster address is a clear error.
(The tier itself is tested in C++ against a real Redis Cluster.)"""
import socket

import pytest

import prefixkv
from conftest import kv_layers, register


@pytest.fixture
def closed_port():
    """A loopback port that refuses connections for the whole test: bound, never
    listening. (Closed at once, it could be bound and listened on by another
    test's server running in parallel, and the cluster would not be absent.)"""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def test_an_absent_cluster_leaves_the_engine_usable(data_dir, rng, closed_port):
    uri = f"redis://127.0.0.1:{closed_port}"
    with prefixkv.Engine.open(data_dir=data_dir, hot_bytes=16 << 20, quiet=True,
                              remote=uri, remote_write="always") as e:
        stats = e.stats()
        assert stats["has_remote"] is True
        assert stats["remote"]["available"] is False
        assert "unavailable" in stats["remote"]["cluster"]
        # Every counter of INFO's # Tier_remote (one shared table), each a count.
        counters = {"hits", "misses", "corruptions", "errors", "bytes_read",
                    "bytes_written", "writes", "dropped", "write_failures",
                    "over_quota", "rewrites_skipped", "queued_blocks", "queued_bytes"}
        assert set(stats["remote"]) == counters | {"cluster", "available"}
        assert all(isinstance(stats["remote"][c], int) for c in counters)
        ns = register(e)
        tokens = list(range(12))
        e.store(ns, tokens, kv_layers(rng, 2, 12))
        restored = e.restore(e.match(ns, tokens))
        assert restored.restored_tokens == 12
        assert restored.tokens_from_remote == 0
        assert e.stats()["remote"]["errors"] >= 1


def test_a_bad_cluster_address_or_write_mode_is_invalid_argument(data_dir):
    with pytest.raises(prefixkv.InvalidArgument):
        prefixkv.Engine.open(data_dir=data_dir, remote="redis://no-port-here", quiet=True)
    with pytest.raises(prefixkv.InvalidArgument, match="write mode"):
        prefixkv.Engine.open(data_dir=data_dir, remote_write="sometimes", quiet=True)


def test_without_a_remote_tier_stats_say_so(engine):
    assert engine.stats()["has_remote"] is False
    assert issubclass(prefixkv.Unavailable, prefixkv.Error)
