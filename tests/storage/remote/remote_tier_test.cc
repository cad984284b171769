// RemoteTier over an in-memory store: the envelope rejects every damaged
// value, writes are queued (bounded, never blocking), reads are batched, a
// down store degrades to misses logged once per outage, and the counters and
// per-namespace limits hold.
#include "prefixkv/advanced/remote_tier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <thread>

#include "tests/support/fake_remote_store.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::FakeRemoteState;
using testing::FakeRemoteStore;

const BlockKey kNs{7, 7};

BlockMeta Meta(uint64_t i, BlockKey ns = kNs) {
  return BlockMeta{BlockKey{ns.hi, 1000 + i}, i == 0 ? ns : BlockKey{ns.hi, 999 + i}, ns,
                   1};
}

SharedBytes Payload(uint64_t i, size_t size = 300) {
  std::string s(size, '\0');
  for (size_t j = 0; j < size; ++j) s[j] = static_cast<char>((i * 131 + j * 7) & 0xff);
  return SharedBytes::Copy(s);
}

class RemoteTierTest : public ::testing::Test {
 protected:
  std::unique_ptr<RemoteTier> Open(RemoteTierOptions o = {}) {
    o.log = log_.Sink();
    return RemoteTier::Open(std::make_unique<FakeRemoteStore>(state_), std::move(o));
  }
  // A tier writing one block per batch, kNs limited to 1000 bytes per 60 s.
  std::unique_ptr<RemoteTier> OpenWithQuota() {
    RemoteTierOptions o;
    o.write_batch_blocks = 1;
    auto tier = Open(o);
    tier->SetNamespaceLimits(kNs, {.ttl_seconds = 60, .max_bytes = 1000});
    return tier;
  }
  // kNs's quota counter in the fake cluster, and its key. REQUIRES: state_->mu
  // held.
  std::string& QuotaCounter() { return state_->values[QuotaKey()]; }
  static std::string QuotaKey() {
    return RemoteTierOptions{}.key_prefix + "quota:" + kNs.ToHex();
  }
  // A tier with kNs's quota whose block 0 (300 bytes) is charged, its window
  // ended (the counter expired) and `fault` set before the block's write
  // fails and its bytes are given back; null when a step failed.
  std::unique_ptr<RemoteTier> RefundAfterTheWindowEnded(
      const std::function<void(FakeRemoteState&)>& fault) {
    auto tier = OpenWithQuota();
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->refused_keys.insert(tier->StoreKey(Meta(0).key));  // its write fails
      state_->hold_sets = true;
    }
    EXPECT_OK(tier->Put(Meta(0), Payload(0), false));  // charged 300, then held
    for (int i = 0; i < 5000; ++i) {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (QuotaCounter() == "300") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      EXPECT_EQ(QuotaCounter(), "300");
      if (QuotaCounter() != "300") return nullptr;
      state_->values.erase(QuotaKey());
      fault(*state_);
    }
    state_->Release();
    tier->Flush();
    EXPECT_EQ(tier->Counters().write_failures, 1u);
    return tier;
  }
  // Blocks 1-4 (300 bytes each), one batch at a time: 3 fit in kNs's 1000.
  void ExpectTheNextWindowHasItsLimit(RemoteTier& tier) {
    for (uint64_t i = 1; i <= 4; ++i) {
      ASSERT_OK(tier.Put(Meta(i), Payload(i), false));
      tier.Flush();
    }
    const RemoteCounters c = tier.Counters();
    EXPECT_EQ(c.writes, 3u) << "3 x 300 bytes fit in 1000";
    EXPECT_EQ(c.over_quota, 1u);
  }
  std::shared_ptr<FakeRemoteState> state_ = std::make_shared<FakeRemoteState>();
  testing::LogLines log_;
};

TEST(RemoteEnvelope, RoundTripsAndRejectsEveryFlippedByteAndAForeignKey) {
  const BlockMeta m = Meta(3);
  const SharedBytes p = Payload(3, 40);
  const std::string value = RemoteTier::EncodeEnvelope(m, p.view());
  ASSERT_OK_AND_ASSIGN(RemoteTier::Decoded d, RemoteTier::DecodeEnvelope(m.key, value));
  EXPECT_EQ(d.payload.view(), p.view());
  EXPECT_EQ(d.meta.key, m.key);
  EXPECT_EQ(d.meta.parent, m.parent);
  EXPECT_EQ(d.meta.namespace_id, m.namespace_id);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d.payload.data()) % 64, 0u)
      << "aligned: restores from RAM slice the tensors without copying";
  // From an aligned value (as the store returns them): a slice, no copy.
  const SharedBytes stored = SharedBytes::Copy(value);
  ASSERT_OK_AND_ASSIGN(RemoteTier::Decoded sliced,
                       RemoteTier::DecodeEnvelope(m.key, stored));
  EXPECT_EQ(sliced.payload.view(), p.view());
  EXPECT_EQ(sliced.payload.data(), stored.data() + (value.size() - p.size()));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(sliced.payload.data()) % 64, 0u);
  for (size_t i = 0; i < value.size(); ++i) {
    std::string bad = value;
    bad[i] ^= 0x01;
    EXPECT_TRUE(RemoteTier::DecodeEnvelope(m.key, bad).status().IsCorruption())
        << "byte " << i << " flipped";
  }
  EXPECT_TRUE(RemoteTier::DecodeEnvelope(m.key, value.substr(0, value.size() - 1))
                  .status()
                  .IsCorruption());
  EXPECT_TRUE(RemoteTier::DecodeEnvelope(Meta(4).key, value).status().IsCorruption())
      << "a value stored under another key";
  EXPECT_TRUE(RemoteTier::DecodeEnvelope(m.key, "").status().IsCorruption());
}

TEST_F(RemoteTierTest, QueuedBlocksAreWrittenAndReadBackInOneBatchWithExactCounters) {
  auto tier = Open();
  for (uint64_t i = 0; i < 10; ++i) ASSERT_OK(tier->Put(Meta(i), Payload(i), false));
  tier->Flush();
  EXPECT_EQ(state_->size(), 10u);
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < 12; ++i) keys.push_back(Meta(i).key);  // 2 never stored
  const uint64_t calls_before = state_->get_calls;
  std::vector<std::optional<SharedBytes>> got = tier->GetMany(keys);
  EXPECT_EQ(state_->get_calls, calls_before + 1) << "one round trip for the batch";
  ASSERT_EQ(got.size(), 12u);
  for (uint64_t i = 0; i < 12; ++i) {
    if (i < 10) {
      ASSERT_TRUE(got[i].has_value()) << i;
      EXPECT_EQ(got[i]->view(), Payload(i).view());
    } else {
      EXPECT_FALSE(got[i].has_value()) << i;
    }
  }
  const RemoteCounters c = tier->Counters();
  EXPECT_EQ(c.writes, 10u);
  EXPECT_EQ(c.bytes_written, 10u * 300);
  EXPECT_EQ(c.hits, 10u);
  EXPECT_EQ(c.misses, 2u);
  EXPECT_EQ(c.bytes_read, 10u * 300);
  EXPECT_EQ(c.queued_blocks, 0u);
  EXPECT_EQ(c.queued_bytes, 0u);
  EXPECT_EQ(c.errors, 0u);
  EXPECT_TRUE(c.available);
  // Peek and Contains read the metadata without counting.
  ASSERT_OK_AND_ASSIGN(BlockMeta meta, tier->Peek(Meta(4).key));
  EXPECT_EQ(meta.parent, Meta(4).parent);
  EXPECT_FALSE(tier->Contains(Meta(11).key));
  EXPECT_EQ(tier->Counters().hits, 10u);
  // Remove never removes a block other nodes may use.
  EXPECT_TRUE(tier->Remove(Meta(4).key).IsNotFound());
  EXPECT_TRUE(tier->Get(Meta(4).key).ok());
}

TEST_F(RemoteTierTest, RawValuesStayLocalAndTtlsFollowTheNamespaceLimits) {
  RemoteTierOptions o;
  o.default_limits.ttl_seconds = 60;
  auto tier = Open(o);
  const BlockKey other{9, 9};
  tier->SetNamespaceLimits(other, {.ttl_seconds = 5, .max_bytes = 0});
  ASSERT_OK(tier->Put(BlockMeta{BlockKey{1, 1}, {}, {}, 0}, Payload(1), false));  // raw
  ASSERT_OK(tier->Put(Meta(0), Payload(0), false));
  ASSERT_OK(tier->Put(Meta(0, other), Payload(0), false));
  tier->Flush();
  std::lock_guard<std::mutex> lock(state_->mu);
  EXPECT_EQ(state_->values.size(), 2u) << "the raw value was not written";
  EXPECT_EQ(state_->ttls.at(tier->StoreKey(Meta(0).key)), 60u);
  EXPECT_EQ(state_->ttls.at(tier->StoreKey(Meta(0, other).key)), 5u);
}

TEST_F(RemoteTierTest, AVictimTheClusterIsKnownToHoldIsNotWrittenAgain) {
  FakeClock clock;
  RemoteTierOptions o;
  o.clock = &clock;
  o.known_present_seconds = 100;
  auto tier = Open(o);
  auto other = Open();                               // another node
  ASSERT_OK(tier->Put(Meta(0), Payload(0), false));  // written by this node
  ASSERT_OK(other->Put(Meta(1), Payload(1), false));
  tier->Flush();
  other->Flush();
  const std::vector<BlockKey> keys = {Meta(1).key};
  ASSERT_TRUE(tier->GetMany(keys)[0].has_value());  // read back by this node
  ASSERT_EQ(tier->Counters().writes, 1u);

  // Evicted locally: the two it knows are skipped, one it never saw is not.
  for (uint64_t i : {0, 1, 2}) tier->OnEvict(Meta(i), Payload(i), false);
  tier->Flush();
  RemoteCounters c = tier->Counters();
  EXPECT_EQ(c.rewrites_skipped, 2u);
  EXPECT_EQ(c.writes, 2u) << "Meta(0) once, Meta(2)";
  // A Put is a new block of this node (write mode always): always written.
  ASSERT_OK(tier->Put(Meta(1), Payload(1), false));
  tier->Flush();
  EXPECT_EQ(tier->Counters().writes, 3u);

  // Past the window the cluster may have dropped it: written again.
  clock.AdvanceMillis(101 * 1000);
  tier->OnEvict(Meta(1), Payload(1), false);
  tier->Flush();
  EXPECT_EQ(tier->Counters().writes, 4u);
  // With a TTL the window is at most half of it (a GET extends no expiry).
  tier->SetNamespaceLimits(kNs, {.ttl_seconds = 60, .max_bytes = 0});
  clock.AdvanceMillis(29 * 1000);
  tier->OnEvict(Meta(1), Payload(1), false);  // written 29 s ago: skipped
  clock.AdvanceMillis(2 * 1000);
  tier->OnEvict(Meta(2), Payload(2), false);  // written 31 s ago: written
  tier->Flush();
  c = tier->Counters();
  EXPECT_EQ(c.rewrites_skipped, 3u);
  EXPECT_EQ(c.writes, 5u);
}

// A block this node wrote, then read back and did not find (the cluster
// FLUSHALLed, a master replaced by a replica without its recent writes, the
// cluster's own eviction) or found damaged (deleted) is no longer known to be
// there: its local copy, recomputed and evicted, is written again. It was
// skipped for the rest of known_present_seconds ("the cluster holds it"),
// and every node missed the block meanwhile.
TEST_F(RemoteTierTest, ABlockReadBackAbsentOrDamagedIsWrittenAgainWhenEvicted) {
  FakeClock clock;
  RemoteTierOptions o;
  o.clock = &clock;
  o.known_present_seconds = 100;
  auto tier = Open(o);
  for (uint64_t i : {0, 1}) ASSERT_OK(tier->Put(Meta(i), Payload(i), false));
  tier->Flush();
  ASSERT_EQ(tier->Counters().writes, 2u);
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->values.erase(tier->StoreKey(Meta(0).key));  // gone from the cluster
  }
  state_->FlipByte(tier->StoreKey(Meta(1).key), 200);
  const std::vector<BlockKey> keys = {Meta(0).key, Meta(1).key};
  for (const auto& v : tier->GetMany(keys)) EXPECT_FALSE(v.has_value());
  tier->Flush();  // the damaged value is deleted
  for (uint64_t i : {0, 1}) tier->OnEvict(Meta(i), Payload(i), false);
  tier->Flush();
  const RemoteCounters c = tier->Counters();
  EXPECT_EQ(c.rewrites_skipped, 0u) << "the cluster was seen without them";
  EXPECT_EQ(c.writes, 4u);
  for (const auto& v : tier->GetMany(keys)) EXPECT_TRUE(v.has_value());
}

TEST_F(RemoteTierTest, WithoutAKnownKeyTableEveryVictimIsWritten) {
  RemoteTierOptions o;
  o.known_keys = 0;
  auto tier = Open(o);
  ASSERT_OK(tier->Put(Meta(0), Payload(0), false));
  tier->Flush();
  tier->OnEvict(Meta(0), Payload(0), false);
  tier->Flush();
  EXPECT_EQ(tier->Counters().writes, 2u);
  EXPECT_EQ(tier->Counters().rewrites_skipped, 0u);
}

TEST_F(RemoteTierTest, ADamagedValueIsACountedMissDeletedAndLoggedOnce) {
  auto tier = Open();
  for (uint64_t i = 0; i < 3; ++i) ASSERT_OK(tier->Put(Meta(i), Payload(i), false));
  tier->Flush();
  state_->FlipByte(tier->StoreKey(Meta(1).key), 200);
  state_->FlipByte(tier->StoreKey(Meta(2).key), 5);
  std::vector<BlockKey> keys = {Meta(0).key, Meta(1).key, Meta(2).key};
  std::vector<std::optional<SharedBytes>> got = tier->GetMany(keys);
  EXPECT_TRUE(got[0].has_value());
  EXPECT_FALSE(got[1].has_value());
  EXPECT_FALSE(got[2].has_value());
  const RemoteCounters c = tier->Counters();
  EXPECT_EQ(c.corruptions, 2u);
  EXPECT_EQ(c.misses, 2u);
  EXPECT_EQ(c.hits, 1u);
  tier->Flush();  // the writers delete them, behind the read
  EXPECT_EQ(state_->size(), 1u) << "damaged values are deleted";
  EXPECT_EQ(log_.Count("checksum mismatch") + log_.Count("envelope"), 1);
}

// A scrape (INFO, /metrics) may come at any moment of a read: here at the log
// line of the read's first corruption, from inside the read. Its counters
// are each read's whole count or none of it: a corruption with its miss,
// hits and misses one per block asked for. The counters were read one by
// one as the read added to them, a corruption before its miss, so a scrape
// showed more corruptions than misses.
TEST_F(RemoteTierTest, AScrapeDuringAReadSeesItsCountsWholeOrNotAtAll) {
  std::atomic<RemoteTier*> scraping{nullptr};
  std::vector<RemoteCounters> scraped;  // the reading thread's only
  RemoteTierOptions o;
  o.log = [&](std::string_view) {
    if (RemoteTier* tier = scraping.load()) scraped.push_back(tier->Counters());
  };
  auto tier = RemoteTier::Open(std::make_unique<FakeRemoteStore>(state_), o);
  for (uint64_t i = 0; i < 2; ++i) ASSERT_OK(tier->Put(Meta(i), Payload(i), false));
  tier->Flush();
  state_->FlipByte(tier->StoreKey(Meta(1).key), 5);
  scraping = tier.get();
  const std::vector<BlockKey> keys = {Meta(0).key, Meta(1).key};
  EXPECT_FALSE(tier->GetMany(keys)[1].has_value());
  scraping = nullptr;
  scraped.push_back(tier->Counters());
  ASSERT_EQ(scraped.size(), 2u) << "the corruption is logged";
  for (const RemoteCounters& c : scraped) {
    EXPECT_LE(c.corruptions, c.misses) << "each corruption is a miss";
    EXPECT_EQ(c.hits + c.misses, c.misses == 0 ? 0u : 2u) << "one count per block";
    EXPECT_EQ(c.bytes_read, c.hits * Payload(0).size());
  }
  EXPECT_EQ(scraped.back().corruptions, 1u);
}

TEST_F(RemoteTierTest, ADownStoreIsMissesAndFailedWritesLoggedOncePerOutage) {
  auto tier = Open();
  ASSERT_OK(tier->Put(Meta(0), Payload(0), false));
  tier->Flush();
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->down = true;
  }
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(tier->Get(Meta(0).key).status().IsNotFound());
  }
  for (uint64_t i = 1; i < 5; ++i) ASSERT_OK(tier->Put(Meta(i), Payload(i), false));
  tier->Flush();  // returns: the writes fail at once, each counted
  RemoteCounters c = tier->Counters();
  EXPECT_FALSE(c.available);
  EXPECT_EQ(c.misses, 20u);
  EXPECT_GE(c.errors, 21u);
  EXPECT_EQ(c.write_failures, 4u);
  EXPECT_EQ(c.dropped, 0u);
  EXPECT_EQ(c.writes, 1u);
  EXPECT_EQ(log_.Count("remote tier unavailable"), 1) << "logged once per outage";
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->down = false;
  }
  ASSERT_OK_AND_ASSIGN(SharedBytes back, tier->Get(Meta(0).key));
  EXPECT_EQ(back.view(), Payload(0).view());
  EXPECT_TRUE(tier->Counters().available);
  EXPECT_EQ(log_.Count("remote tier available again"), 1);
}

TEST_F(RemoteTierTest, AFailedWriteCostsOnlyThatBlockNeverTheQueue) {
  RemoteTierOptions o;
  o.write_batch_blocks = 8;
  auto tier = Open(o);
  constexpr uint64_t kBlocks = 60;
  {
    // Every third block lives on a master at maxmemory: its SET fails. The
    // writer is held so that every block is queued before the first batch
    // (a batch of 2 or more, or Meta(0) alone, holds a block that is stored).
    std::lock_guard<std::mutex> lock(state_->mu);
    for (uint64_t i = 1; i < kBlocks; i += 3)
      state_->refused_keys.insert(tier->StoreKey(Meta(i).key));
    state_->hold_sets = true;
  }
  for (uint64_t i = 0; i < kBlocks; ++i) ASSERT_OK(tier->Put(Meta(i), Payload(i), false));
  state_->Release();
  tier->Flush();
  RemoteCounters c = tier->Counters();
  EXPECT_EQ(c.write_failures, kBlocks / 3);
  EXPECT_EQ(c.writes, kBlocks - kBlocks / 3);
  EXPECT_EQ(c.bytes_written, (kBlocks - kBlocks / 3) * 300);
  EXPECT_EQ(c.dropped, 0u) << "nothing else was lost";
  EXPECT_EQ(c.queued_blocks, 0u);
  EXPECT_EQ(state_->size(), kBlocks - kBlocks / 3);
  // The cluster answered: no outage, the first cause logged once.
  EXPECT_TRUE(c.available);
  EXPECT_GE(c.errors, 1u);
  EXPECT_EQ(log_.Count("remote tier unavailable"), 0);
  EXPECT_EQ(log_.Count("some writes failed"), 1);
  // Every other block reads back intact; a failed one is a clean miss.
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < kBlocks; ++i) keys.push_back(Meta(i).key);
  std::vector<std::optional<SharedBytes>> got = tier->GetMany(keys);
  for (uint64_t i = 0; i < kBlocks; ++i) {
    if (i % 3 == 1) {
      EXPECT_FALSE(got[i].has_value()) << i;
    } else {
      ASSERT_TRUE(got[i].has_value()) << i;
      EXPECT_EQ(got[i]->view(), Payload(i).view()) << i;
    }
  }
  EXPECT_EQ(tier->Counters().corruptions, 0u);
  // A failed block is not taken for present: evicted later, it is written.
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->refused_keys.clear();
  }
  tier->OnEvict(Meta(0), Payload(0), false);
  tier->OnEvict(Meta(1), Payload(1), false);
  tier->Flush();
  c = tier->Counters();
  EXPECT_EQ(c.writes, kBlocks - kBlocks / 3 + 1);
  EXPECT_EQ(c.rewrites_skipped, 1u);
  ASSERT_OK_AND_ASSIGN(SharedBytes back, tier->Get(Meta(1).key));
  EXPECT_EQ(back.view(), Payload(1).view());
}

TEST_F(RemoteTierTest, AStoreDownAtOpenIsReportedUnavailable) {
  state_->down = true;
  auto tier = Open();
  EXPECT_FALSE(tier->Counters().available);
  EXPECT_EQ(log_.Count("unavailable at open"), 1);
  EXPECT_FALSE(tier->Get(Meta(0).key).ok());
}

TEST_F(RemoteTierTest, AFullQueueDropsBlocksInsteadOfBlockingTheCaller) {
  RemoteTierOptions o;
  o.queue_blocks = 4;
  o.write_batch_blocks = 1;
  o.writer_threads = 1;
  state_->hold_sets = true;  // the cluster is slow: the writer waits in its first write
  auto tier = Open(o);
  for (uint64_t i = 0; i < 20; ++i) ASSERT_OK(tier->Put(Meta(i), Payload(i), false));
  // One in flight (held), 4 queued, the rest dropped; Put never waited.
  RemoteCounters c = tier->Counters();
  EXPECT_EQ(c.queued_blocks + c.dropped, 20u);
  EXPECT_LE(c.queued_blocks, 5u);
  EXPECT_GE(c.dropped, 15u);
  state_->Release();
  tier->Flush();
  c = tier->Counters();
  EXPECT_EQ(c.writes + c.dropped, 20u);
  EXPECT_EQ(c.queued_blocks, 0u);
  EXPECT_EQ(state_->size(), c.writes);
}

TEST_F(RemoteTierTest, ANamespaceStopsWritingAtItsByteLimitOthersDoNot) {
  auto tier = OpenWithQuota();
  const BlockKey other{9, 9};
  for (uint64_t i = 0; i < 10; ++i) {
    ASSERT_OK(tier->Put(Meta(i), Payload(i), false));  // 300 bytes each
    ASSERT_OK(tier->Put(Meta(i, other), Payload(i), false));
    tier->Flush();
  }
  const RemoteCounters c = tier->Counters();
  EXPECT_EQ(c.over_quota, 7u) << "3 x 300 bytes fit in 1000";
  EXPECT_EQ(c.writes, 13u);
  std::vector<BlockKey> limited, unlimited;
  for (uint64_t i = 0; i < 10; ++i) {
    limited.push_back(Meta(i).key);
    unlimited.push_back(Meta(i, other).key);
  }
  size_t found = 0;
  for (const auto& v : tier->GetMany(limited)) found += v.has_value();
  EXPECT_EQ(found, 3u);
  found = 0;
  for (const auto& v : tier->GetMany(unlimited)) found += v.has_value();
  EXPECT_EQ(found, 10u);
}

// A namespace's quota counter the cluster cannot update (down, silent): its
// blocks are not written, and they are failed writes, not blocks over the
// namespace's limit (over_quota would tell an operator the namespace used
// its bytes up while it wrote none).
TEST_F(RemoteTierTest, AQuotaCounterTheClusterCannotUpdateFailsTheBlocksNotTheQuota) {
  RemoteTierOptions o;
  o.write_batch_blocks = 4;
  auto tier = Open(o);
  tier->SetNamespaceLimits(kNs, {.ttl_seconds = 60, .max_bytes = 1000});
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->down = true;
  }
  for (uint64_t i = 0; i < 2; ++i) ASSERT_OK(tier->Put(Meta(i), Payload(i), false));
  tier->Flush();
  const RemoteCounters c = tier->Counters();
  EXPECT_EQ(c.writes, 0u);
  EXPECT_EQ(c.over_quota, 0u) << "the namespace wrote nothing of its 1000 bytes";
  EXPECT_EQ(c.write_failures, 2u);
  EXPECT_EQ(c.writes + c.write_failures + c.over_quota + c.dropped, 2u);
  EXPECT_FALSE(c.available);
}

// Blocks whose write the cluster failed (a master at maxmemory, down) take
// none of their namespace's bytes: the quota counter is charged before the
// write and given back what was not written, so the namespace still writes
// its limit's worth once the cluster takes writes again (over_quota counted
// blocks of a namespace that had written nothing).
TEST_F(RemoteTierTest, BlocksTheClusterFailedToWriteTakeNoneOfTheQuota) {
  auto tier = OpenWithQuota();
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    for (uint64_t i = 0; i < 3; ++i)
      state_->refused_keys.insert(tier->StoreKey(Meta(i).key));
  }
  for (uint64_t i = 0; i < 6; ++i) {
    ASSERT_OK(tier->Put(Meta(i), Payload(i), false));  // 300 bytes each
    tier->Flush();
  }
  const RemoteCounters c = tier->Counters();
  EXPECT_EQ(c.write_failures, 3u);
  EXPECT_EQ(c.writes, 3u) << "3 x 300 bytes fit in 1000";
  EXPECT_EQ(c.over_quota, 0u);
  std::lock_guard<std::mutex> lock(state_->mu);
  EXPECT_EQ(QuotaCounter(), "900");
}

// A batch refused as over the namespace's limit is not written, so its bytes
// are given back to the counter too: left charged, one batch that did not
// fit pushed the counter past the limit, and every later block of the
// namespace (on every node: the counter is cluster-wide), even one that fit
// in the room left, was refused for the rest of the TTL window.
TEST_F(RemoteTierTest, ABatchRefusedOverQuotaTakesNoneOfTheQuota) {
  auto tier = OpenWithQuota();
  const size_t sizes[] = {600, 600, 300};  // the second does not fit, the third does
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_OK(tier->Put(Meta(i), Payload(i, sizes[i]), false));
    tier->Flush();
  }
  const RemoteCounters c = tier->Counters();
  EXPECT_EQ(c.over_quota, 1u);
  EXPECT_EQ(c.writes, 2u) << "600 + 300 bytes fit in 1000";
  EXPECT_EQ(c.bytes_written, 900u);
  std::lock_guard<std::mutex> lock(state_->mu);
  EXPECT_EQ(QuotaCounter(), "900");
}

// A batch whose blocks of a namespace take it past its limit still writes
// those that fit in the room left, in queue order: refused whole, a namespace
// whose stores queue more than its limit at a time (a chain of large blocks,
// written in batches of up to 64) never wrote a byte of it, in any window.
TEST_F(RemoteTierTest, ABatchPastTheLimitStillWritesTheBlocksThatFit) {
  auto tier = Open();  // batches of up to 64 blocks
  tier->SetNamespaceLimits(kNs, {.ttl_seconds = 60, .max_bytes = 1000});
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->hold_sets = true;  // the writer waits inside its first batch's SET
  }
  const BlockKey other{9, 9};
  ASSERT_OK(tier->Put(Meta(0, other), Payload(0), false));
  for (int i = 0; i < 5000; ++i) {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->sets_held == 1) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (uint64_t i = 0; i < 4; ++i) ASSERT_OK(tier->Put(Meta(i), Payload(i), false));
  state_->Release();  // then the 4 (300 bytes each) go as one batch
  tier->Flush();
  const RemoteCounters c = tier->Counters();
  EXPECT_EQ(c.writes, 4u) << "3 x 300 bytes fit in 1000, and the other namespace's";
  EXPECT_EQ(c.over_quota, 1u);
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < 4; ++i) keys.push_back(Meta(i).key);
  const std::vector<std::optional<SharedBytes>> got = tier->GetMany(keys);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(got[i].has_value(), i < 3) << i;
  std::lock_guard<std::mutex> lock(state_->mu);
  EXPECT_EQ(QuotaCounter(), "900");
}

// A quota counter below zero (a refund that found the counter expired and
// created it negative, before its own fix-up back to zero) is room, not a
// namespace over its limit: the charge's total was compared as unsigned, so
// a block charged meanwhile on any node read a huge total and was refused.
TEST_F(RemoteTierTest, AQuotaCounterBelowZeroLeavesRoomNotOverTheLimit) {
  auto tier = OpenWithQuota();
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    QuotaCounter() = "-500";
  }
  ASSERT_OK(tier->Put(Meta(0), Payload(0), false));  // 300 bytes: -200 after it
  tier->Flush();
  const RemoteCounters c = tier->Counters();
  EXPECT_EQ(c.over_quota, 0u);
  EXPECT_EQ(c.writes, 1u);
  EXPECT_EQ(c.bytes_written, 300u);
}

// A refund that finds the quota counter expired creates it below zero, and
// is set back to zero even when the counter's EXPIRE then fails: left there
// (no expiry, -300), the next window let the namespace write 300 bytes past
// its limit (4 x 300 bytes under 1000).
TEST_F(RemoteTierTest, ARefundThatFindsTheCounterExpiredIsSetBackToZeroIfItsExpiryFails) {
  auto tier = RefundAfterTheWindowEnded([](FakeRemoteState& s) {
    s.failing_expires = 1;  // the window ended; the refund's EXPIRE fails
  });
  ASSERT_NE(tier, nullptr);
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    EXPECT_EQ(QuotaCounter(), "0");
  }
  ExpectTheNextWindowHasItsLimit(*tier);
}

// The refund finds the counter expired and creates it below zero (-300);
// the reset back to zero then fails (the counter's master down for that
// call). The counter stayed at -300, and the next window let the namespace
// write 300 bytes past its limit (4 x 300 under 1000). The node keeps the
// reset it owes and makes it at its next batch.
TEST_F(RemoteTierTest, ARefundWhoseResetFailsIsResetAtTheNextBatch) {
  auto tier = RefundAfterTheWindowEnded([](FakeRemoteState& s) {
    s.failing_adds = 1;  // the refund's reset
  });
  ASSERT_NE(tier, nullptr);
  ExpectTheNextWindowHasItsLimit(*tier);
}

// Flush waits for the blocks queued before it, not for an empty queue: with
// stores coming faster than the cluster takes them (always mode on a busy
// node), the queue is never empty, and Engine::Flush, which waits for it,
// never returned while they went on.
TEST_F(RemoteTierTest, FlushWaitsForTheBlocksQueuedBeforeItNotForAnEmptyQueue) {
  RemoteTierOptions o;
  o.queue_blocks = 16;
  o.write_batch_blocks = 1;
  state_->set_delay = std::chrono::milliseconds(1);  // each write: 1 ms
  auto tier = Open(o);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> puts{0};
  std::thread producer([&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    for (uint64_t i = 0; !stop && std::chrono::steady_clock::now() < until; ++i) {
      ASSERT_OK(tier->Put(Meta(i), Payload(i, 64), false));
      puts.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  while (puts.load() < 100) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto start = std::chrono::steady_clock::now();
  tier->Flush();
  const double millis =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
          .count();
  stop = true;
  producer.join();
  std::printf("[flush under load] %.1f ms\n", millis);
  // 16 queued and one in flight at 1 ms each, against the producer's 3 s.
  EXPECT_LT(millis, 1000) << "Flush waited for the stores after it";
  tier->Flush();
  const RemoteCounters c = tier->Counters();
  EXPECT_EQ(c.writes + c.dropped, puts.load());
  EXPECT_EQ(c.queued_blocks, 0u);
}

}  // namespace
}  // namespace prefixkv
