// Engine: open, register, store / match / restore, values, restart, close,
// and the one hot budget every model shares.
#include "prefixkv/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/advanced/hash.h"
#include "prefixkv/advanced/hot_tier.h"
#include "prefixkv/advanced/shared_hot_budget.h"
#include "prefixkv/advanced/ssd_tier.h"
#include "prefixkv/advanced/tier_stack.h"
#include "prefixkv/tier_counter_fields.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/fault_injection_file_system.h"
#include "tests/support/forwarding_file_system.h"
#include "tests/support/test_util.h"
#include "value_catalog.h"
#include "value_record.h"

namespace prefixkv {
namespace {

using testing::kBlockTokens;
using testing::KvLayers;
using testing::KvSpec;
using testing::Quiet;
using testing::Tokens;

// A fake time that reads as a plausible Unix time (2026).
constexpr uint64_t kUnixNanos = 1'780'000'000'000ull * 1'000'000;

class EngineTest : public testing::EngineFixture {
 protected:
  EngineTest() : EngineFixture("EngineTest", kUnixNanos) {}  // a Unix time in 2026

  // The hot tier's charge for one block of KvSpec(), as a RAM-only probe
  // engine charges it (0 if the probe failed).
  uint64_t OneBlockCharge() {
    auto probe = Open({.hot_capacity_bytes = 16 << 20});
    if (probe == nullptr) return 0;
    StatusOr<Namespace> ns = probe->RegisterModel(KvSpec());
    EXPECT_OK(ns);
    if (!ns.ok()) return 0;
    StoreAll(*probe, *ns, Tokens(kBlockTokens));
    return probe->Stats().hot.bytes;
  }
};

TEST_F(EngineTest, RamOnlyEngineRestoresWhatItStoredByteForByte) {
  auto e = Open({.hot_capacity_bytes = 16 << 20});
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  const std::vector<int32_t> tokens = Tokens(5 * kBlockTokens);
  const std::vector<LayerState> layers = StoreAll(*e, ns, tokens);
  RestoreResult r = MatchAndRestore(*e, ns, tokens);
  EXPECT_EQ(r.restored_tokens, tokens.size());
  EXPECT_EQ(r.blocks_from_hot, 5u);
  EXPECT_EQ(r.layers, layers);
  EXPECT_EQ(EngineSsdTier(*e), nullptr);
  EXPECT_FALSE(e->Stats().has_ssd);
}

// ReuseHint::kUnlikely (docs/eviction.md, "Reuse hints"): a store's new
// blocks leave the hot tier before older blocks without the hint, and a
// restore (a read) clears the hint. RAM only, leaf-lru, room for 9 blocks.
TEST_F(EngineTest, BlocksStoredAsUnlikelyToBeReusedLeaveTheHotTierFirst) {
  const uint64_t block_charge = OneBlockCharge();
  ASSERT_GT(block_charge, 0u);
  auto e = Open({.hot_capacity_bytes = 9 * block_charge,
                 .hot_policy = EvictionPolicyKind::kLeafLru});
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  const std::vector<int32_t> a = Tokens(4 * kBlockTokens, 1000);
  const std::vector<int32_t> b = Tokens(3 * kBlockTokens, 2000);
  StoreAll(*e, ns, a);
  ASSERT_OK_AND_ASSIGN(StoreResult stored_b,
                       e->Store(ns, b, KvLayers(2, static_cast<int64_t>(b.size()), rng_),
                                {.reuse = ReuseHint::kUnlikely}));
  EXPECT_EQ(stored_b.blocks_written, 3u);
  EXPECT_EQ(stored_b.blocks_hinted_unlikely, 3u);
  // b extended by one block, hinted: only the block it writes is hinted.
  std::vector<int32_t> b_longer = b;
  for (int32_t t : Tokens(kBlockTokens, 3000)) b_longer.push_back(t);
  ASSERT_OK_AND_ASSIGN(
      StoreResult stored_longer,
      e->Store(ns, b_longer, KvLayers(2, static_cast<int64_t>(b_longer.size()), rng_),
               {.reuse = ReuseHint::kUnlikely}));
  EXPECT_EQ(stored_longer.blocks_deduplicated, 3u);
  EXPECT_EQ(stored_longer.blocks_hinted_unlikely, 1u);
  // 8 blocks resident; c's 3 blocks need 2 more: b's chain leaves from its
  // tip (hinted leaves first), a (older, no hint) stays whole.
  StoreAll(*e, ns, Tokens(3 * kBlockTokens, 4000));
  EXPECT_EQ(e->Stats().hot.evictions, 2u);
  ASSERT_OK_AND_ASSIGN(MatchResult match_a, e->Match(ns, a));
  EXPECT_EQ(match_a.keys.size(), 4u);
  ASSERT_OK_AND_ASSIGN(MatchResult match_b, e->Match(ns, b_longer));
  EXPECT_EQ(match_b.keys.size(), 2u);
  // Reading b's two blocks clears their hint: the next victim is a's tip, the
  // least recently used leaf, and b's blocks stay.
  EXPECT_EQ(MatchAndRestore(*e, ns, b_longer).restored_tokens, 2u * kBlockTokens);
  StoreAll(*e, ns, Tokens(kBlockTokens, 5000));
  ASSERT_OK_AND_ASSIGN(match_b, e->Match(ns, b_longer));
  EXPECT_EQ(match_b.keys.size(), 2u);
  ASSERT_OK_AND_ASSIGN(match_a, e->Match(ns, a));
  EXPECT_EQ(match_a.keys.size(), 3u);
  ASSERT_OK_AND_ASSIGN(EngineAudit audit, e->Audit());
  EXPECT_TRUE(audit.ok());
}

// Flush and Audit are maintenance: the hot tier's hit and insert counters
// stay as the stores and restores left them, and so does the eviction
// order (a hinted block is still the first victim).
TEST_F(EngineTest, FlushAndAuditCountNoHitsAndKeepTheEvictionOrder) {
  auto e = Open(OnDisk(16 << 20));
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  const std::vector<int32_t> a = Tokens(3 * kBlockTokens, 100);
  StoreAll(*e, ns, a);
  ASSERT_OK(e->Store(ns, Tokens(kBlockTokens, 900), KvLayers(2, kBlockTokens, rng_),
                     {.reuse = ReuseHint::kUnlikely}));
  MatchAndRestore(*e, ns, a);
  const TierCounters before = e->Stats().hot;
  ASSERT_OK(e->Flush());
  ASSERT_OK_AND_ASSIGN(EngineAudit audit, e->Audit());
  EXPECT_TRUE(audit.ok());
  const TierCounters after = e->Stats().hot;
  EXPECT_EQ(after.hits, before.hits);
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(after.inserts, before.inserts);
  EXPECT_EQ(e->Stats().dirty_blocks, 0u);
  // The hinted block is still the hot tier's first victim: a quota one byte
  // under the model's share evicts exactly it.
  HotTier* hot = EngineHotTier(*e, ns);
  ASSERT_NE(hot, nullptr);
  ASSERT_OK_AND_ASSIGN(MatchResult hinted, e->Match(ns, Tokens(kBlockTokens, 900)));
  ASSERT_EQ(hinted.keys.size(), 1u);
  ASSERT_OK(hot->budget().SetOwnerQuota(hot->owner(), after.bytes - 1));
  EXPECT_FALSE(hot->Contains(hinted.keys[0]));
  ASSERT_OK_AND_ASSIGN(MatchResult still, e->Match(ns, a));
  EXPECT_EQ(still.tiers, std::vector<TierLevel>(3, TierLevel::kHot));
}

TEST_F(EngineTest, OptionsThatCannotWorkAreRejected) {
  EXPECT_TRUE(
      Engine::Open(Quiet({.hot_capacity_bytes = 0})).status().IsInvalidArgument());
  // An advisor that would allocate gigabytes: refused, not a bad_alloc.
  EngineOptions huge_advisor;
  huge_advisor.advisor_max_keys = uint32_t{1} << 30;
  EXPECT_TRUE(Engine::Open(Quiet(huge_advisor)).status().IsInvalidArgument());
  EngineOptions missing = OnDisk();
  missing.data_dir = (dir_.path() / "absent").string();
  missing.create_if_missing = false;
  EXPECT_TRUE(Engine::Open(Quiet(missing)).status().IsNotFound());
  EXPECT_FALSE(std::filesystem::exists(missing.data_dir)) << "nothing may be created";
}

TEST_F(EngineTest, ARestartRestoresFromSsd) {
  const std::vector<int32_t> tokens = Tokens(6 * kBlockTokens);
  std::vector<LayerState> layers;
  {
    auto e = Open(OnDisk());
    ASSERT_NE(e, nullptr);
    ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
    layers = StoreAll(*e, ns, tokens);
    EXPECT_GT(e->Stats().dirty_blocks, 0u) << "write-back: blocks start in RAM only";
    ASSERT_OK(e->Close());
  }
  auto e = Open(OnDisk());
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  ASSERT_OK_AND_ASSIGN(MatchResult m, e->Match(ns, tokens));
  EXPECT_EQ(m.tiers, std::vector<TierLevel>(6, TierLevel::kSsd));
  RestoreResult r = MatchAndRestore(*e, ns, tokens);
  EXPECT_EQ(r.restored_tokens, tokens.size());
  EXPECT_EQ(r.blocks_from_ssd, 6u);
  EXPECT_EQ(r.layers, layers);
}

TEST_F(EngineTest, TheDestructorClosesAndPersistsAnEngineNobodyClosed) {
  const std::vector<int32_t> tokens = Tokens(3 * kBlockTokens);
  {
    auto e = Open(OnDisk());
    ASSERT_NE(e, nullptr);
    ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
    StoreAll(*e, ns, tokens);
  }
  auto e = Open(OnDisk());
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(EngineSsdTier(*e)->open_report().blocks, 3u);
  EXPECT_TRUE(EngineSsdTier(*e)->open_report().previous_shutdown_clean);
}

TEST_F(EngineTest, EveryCallAfterCloseIsRefusedAndCloseIsIdempotent) {
  auto e = Open(OnDisk());
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  ASSERT_OK(e->Close());
  EXPECT_TRUE(e->closed());
  ASSERT_OK(e->Close());
  EXPECT_TRUE(e->Match(ns, Tokens(4)).status().IsInvalidArgument());
  EXPECT_TRUE(e->Store(ns, Tokens(4), {}).status().IsInvalidArgument());
  EXPECT_TRUE(e->RegisterModel(KvSpec("other")).status().IsInvalidArgument());
  EXPECT_TRUE(
      e->PutValue("k", SharedBytes::Copy(std::string_view("v"))).IsInvalidArgument());
  EXPECT_TRUE(e->GetValue("k").status().IsInvalidArgument());
  EXPECT_TRUE(e->Flush().IsInvalidArgument());
  EXPECT_TRUE(e->Audit().status().IsInvalidArgument());
  EXPECT_EQ(e->Stats().hot.entries, 0u);
}

TEST_F(EngineTest, RegisteringTheSameSpecTwiceGivesTheSameNamespace) {
  auto e = Open(OnDisk());
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace a, e->RegisterModel(KvSpec()));
  ASSERT_OK_AND_ASSIGN(Namespace b, e->RegisterModel(KvSpec()));
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(a.root, b.root);
  EXPECT_TRUE(e->RegisterModel(KvSpec(), {.store_partial_tail = true})
                  .status()
                  .IsInvalidArgument());
  NamespaceSpec bad = KvSpec();
  bad.layer_types[0] = "NoSuchCache";
  EXPECT_TRUE(e->RegisterModel(bad).status().IsInvalidArgument());
  ASSERT_OK_AND_ASSIGN(Namespace found, e->FindModel(a.root));
  EXPECT_EQ(found.index, a.index);
  EXPECT_TRUE(e->FindModel(BlockKey{1, 2}).status().IsNotFound());
  EXPECT_EQ(e->Stats().owners.size(), 1u) << "a failed registration adds no owner";
}

TEST_F(EngineTest, EachModelIsAnOwnerOfOneBudgetThatNeverOverflows) {
  // Two models share 64 KiB; each store of one pushes the other's least
  // recently used blocks out to SSD, through that model's own spill path.
  auto e = Open(OnDisk(64 << 10));
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace a, e->RegisterModel(KvSpec("model-a")));
  ASSERT_OK_AND_ASSIGN(Namespace b, e->RegisterModel(KvSpec("model-b")));
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 12; ++i) {
    prompts.push_back(Tokens(4 * kBlockTokens, 1000 * i));
    StoreAll(*e, i % 2 == 0 ? a : b, prompts.back());
    const EngineStats s = e->Stats();
    ASSERT_LE(s.hot.bytes, s.hot_capacity_bytes);
    ASSERT_EQ(s.owners.size(), 2u);
    EXPECT_EQ(s.hot.bytes, s.owners[0].hot.bytes + s.owners[1].hot.bytes);
  }
  const EngineStats s = e->Stats();
  EXPECT_EQ(s.owners[0].name, "model-a");
  EXPECT_EQ(s.owners[1].name, "model-b");
  EXPECT_GT(s.owners[0].hot.evictions, 0u) << "b's stores evict a's blocks too";
  EXPECT_GT(s.owners[0].hot.spills, 0u) << "dirty victims go to the SSD write-back";
  EXPECT_GT(s.owners[1].hot.spills, 0u);
  // Nothing was lost: every prompt restores completely, from RAM or SSD.
  for (int i = 0; i < 12; ++i) {
    RestoreResult r = MatchAndRestore(*e, i % 2 == 0 ? a : b, prompts[i]);
    EXPECT_EQ(r.restored_tokens, prompts[i].size()) << "prompt " << i;
  }
  ASSERT_OK_AND_ASSIGN(EngineAudit audit, e->Audit());
  EXPECT_TRUE(audit.ok()) << (audit.findings.empty() ? "orphans"
                                                     : audit.findings[0].what + ": " +
                                                           audit.findings[0].detail);
}

TEST_F(EngineTest, AModelQuotaCapsItsShareOfTheBudget) {
  auto e = Open(OnDisk(1 << 20));
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns,
                       e->RegisterModel(KvSpec(), {.hot_quota_bytes = 16 << 10}));
  for (int i = 0; i < 8; ++i) StoreAll(*e, ns, Tokens(4 * kBlockTokens, 100 * i));
  const EngineStats s = e->Stats();
  EXPECT_LE(s.owners[0].hot.bytes, 16u << 10);
  EXPECT_EQ(s.owners[0].hot_quota_bytes, std::optional<uint64_t>(16 << 10));
  EXPECT_GT(s.owners[0].hot.evictions, 0u);
}

TEST_F(EngineTest, TheSameModelNameWithAnotherLayoutIsAnotherOwner) {
  auto e = Open({.hot_capacity_bytes = 1 << 20});
  ASSERT_NE(e, nullptr);
  ASSERT_OK(e->RegisterModel(KvSpec("llama", 2)).status());
  ASSERT_OK_AND_ASSIGN(Namespace other, e->RegisterModel(KvSpec("llama", 3)));
  const EngineStats s = e->Stats();
  ASSERT_EQ(s.owners.size(), 2u);
  EXPECT_EQ(s.owners[0].name, "llama");
  EXPECT_EQ(s.owners[1].name, "llama@" + other.root.ToHex().substr(0, 8));
}

TEST_F(EngineTest, WriteThroughStoresOnSsdBeforeStoreReturns) {
  EngineOptions o = OnDisk();
  o.write_through = true;
  auto e = Open(o);
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  StoreAll(*e, ns, Tokens(3 * kBlockTokens));
  const EngineStats s = e->Stats();
  EXPECT_EQ(s.dirty_blocks, 0u);
  EXPECT_EQ(s.ssd.entries, 3u);
  EXPECT_EQ(s.hot.entries, 3u) << "and a clean copy stays in RAM";
}

TEST_F(EngineTest, ValuesLiveApartFromBlocksAndSurviveARestart) {
  {
    auto e = Open(OnDisk());
    ASSERT_NE(e, nullptr);
    ASSERT_OK(e->PutValue("greeting", SharedBytes::Copy(std::string_view("hello"))));
    ASSERT_OK(e->PutValue("gone", SharedBytes::Copy(std::string_view("x"))));
    EXPECT_TRUE(e->ContainsValue("greeting"));
    ASSERT_OK_AND_ASSIGN(bool deleted, e->DeleteValue("gone"));
    EXPECT_TRUE(deleted);
    ASSERT_OK_AND_ASSIGN(bool again, e->DeleteValue("gone"));
    EXPECT_FALSE(again);
    EXPECT_TRUE(e->GetValue("gone").status().IsNotFound());
    ASSERT_OK(
        e->PutValue("greeting", SharedBytes::Copy(std::string_view("hello, again"))));
    const EngineStats s = e->Stats();
    ASSERT_EQ(s.owners.size(), 1u);
    EXPECT_EQ(s.owners[0].name, "values");
  }
  auto e = Open(OnDisk());
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(SharedBytes v, e->GetValue("greeting"));
  EXPECT_EQ(v.view(), "hello, again");
  EXPECT_FALSE(e->ContainsValue("gone"));
}

// CountValues counts a key once whatever tiers hold it; ClearValues removes
// every value from every tier, for good.
TEST_F(EngineTest, CountsAndClearsValuesInEveryTier) {
  const auto put = [](Engine* e, const char* k) {
    return e->PutValue(k, SharedBytes::Copy(std::string_view(k)));
  };
  {
    auto e = Open(OnDisk());
    ASSERT_NE(e, nullptr);
    for (const char* k : {"a", "b", "c"}) ASSERT_OK(put(e.get(), k));
    ASSERT_OK_AND_ASSIGN(uint64_t n, e->CountValues());
    EXPECT_EQ(n, 3u);
  }
  auto e = Open(OnDisk());  // the values are on SSD only now
  ASSERT_NE(e, nullptr);
  ASSERT_OK(e->GetValue("a").status());  // promoted: in RAM and on SSD
  ASSERT_OK(put(e.get(), "d"));          // in RAM only
  ASSERT_OK_AND_ASSIGN(uint64_t n, e->CountValues());
  EXPECT_EQ(n, 4u);
  ASSERT_OK_AND_ASSIGN(uint64_t removed, e->ClearValues());
  EXPECT_EQ(removed, 4u);
  ASSERT_OK_AND_ASSIGN(n, e->CountValues());
  EXPECT_EQ(n, 0u);
  EXPECT_TRUE(e->GetValue("b").status().IsNotFound());
  ASSERT_OK(e->Close());
  EXPECT_TRUE(e->CountValues().status().IsInvalidArgument());
  auto reopened = Open(OnDisk());
  ASSERT_NE(reopened, nullptr);
  ASSERT_OK_AND_ASSIGN(n, reopened->CountValues());
  EXPECT_EQ(n, 0u);
}

// Calls OnSegmentWrite with the bytes of every SSD segment write before it;
// its error fails the write.
class SegmentWriteFileSystem : public testing::ForwardingFileSystem {
 public:
  StatusOr<std::unique_ptr<FileHandle>> OpenFile(
      const std::string& path, const FileOpenOptions& options) override {
    StatusOr<std::unique_ptr<FileHandle>> f =
        ForwardingFileSystem::OpenFile(path, options);
    if (!f.ok() || path.find(".seg") == std::string::npos) return f;
    return std::unique_ptr<FileHandle>(new Handle(this, std::move(*f)));
  }

 protected:
  virtual Status OnSegmentWrite(std::string_view bytes) = 0;

 private:
  class Handle final : public testing::ForwardingFileHandle {
   public:
    Handle(SegmentWriteFileSystem* fs, std::unique_ptr<FileHandle> base)
        : ForwardingFileHandle(std::move(base)), fs_(fs) {}
    Status Write(uint64_t offset, const void* data, size_t n) override {
      PKV_RETURN_IF_ERROR(
          fs_->OnSegmentWrite(std::string_view(static_cast<const char*>(data), n)));
      return ForwardingFileHandle::Write(offset, data, n);
    }

   private:
    SegmentWriteFileSystem* fs_;
  };
};

// Fails SSD segment writes that carry "value-of-y", and those that carry
// "value-of-x" while `fail_x` is set; on the first one carrying "value-of-x"
// after that runs `hook` (on the writer's thread, before the write).
class MarkedWriteFileSystem final : public SegmentWriteFileSystem {
 public:
  std::atomic<bool> fail_x{true};
  std::function<void()> hook;  // set before any write
  bool hook_ran() const { return hook_ran_.load(); }

 private:
  Status OnSegmentWrite(std::string_view bytes) override {
    if (bytes.find("value-of-y") != std::string_view::npos) {
      return Status::IOError("injected: y's write-back fails");
    }
    if (bytes.find("value-of-x") != std::string_view::npos) {
      if (fail_x.load()) return Status::IOError("injected: x's first write fails");
      if (!hook_ran_.exchange(true)) hook();
    }
    return Status::OK();
  }
  std::atomic<bool> hook_ran_{false};
};

// A whole-space walk (DBSIZE, KEYS, FLUSHDB) flushes the SSD write-back
// queue, then walks the RAM tier and the SSD index. The Flush waits only for
// what was queued before it, so a value evicted to the queue meanwhile was in
// neither walk: FLUSHDB left it queued, it was written afterwards and GET
// served the cleared key again. Deterministic: x's write-back fails once and
// waits (fake clock) until the Flush retries it; that retry queues y (an
// eviction after the Flush began), whose own write then fails, so y is
// queued, not stored, while ClearValues walks.
TEST_F(EngineTest, AWholeSpaceWalkSeesAValueQueuedForWriteBackAfterItsFlush) {
  MarkedWriteFileSystem fs;
  EngineHooks hooks;
  hooks.configure_ssd = [&](SsdTierOptions& o) {
    o.file_system = &fs;
    o.clock = &clock_;
    o.retry_interval_ms = 3'600'000;  // never on the fake clock: Flush retries
    o.writer_threads = 1;
  };
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Engine> e,
                       OpenEngine(Quiet(OnDiskOnFakeClock()), hooks));
  ASSERT_OK(e->PutValue("w", SharedBytes::Copy(std::string_view("w"))));  // in RAM
  SsdTier* ssd = EngineSsdTier(*e);
  ASSERT_NE(ssd, nullptr);
  // As the hot tier hands a dirty victim of the key-value space to the SSD.
  const auto evict = [&](std::string_view name, std::string_view value) {
    const SharedBytes record =
        internal::EncodeValueRecord(name, 0, SharedBytes::Copy(value));
    ssd->OnEvict(BlockMeta{internal::ValueKey(name), BlockKey{}, BlockKey{}, 0}, record,
                 /*dirty=*/true);
  };
  fs.hook = [&] { evict("y", "value-of-y"); };
  evict("x", "value-of-x");
  while (ssd->WriteBackStatus().ok()) std::this_thread::yield();  // x failed once
  fs.fail_x = false;

  ASSERT_OK_AND_ASSIGN(uint64_t removed, e->ClearValues());
  ASSERT_TRUE(fs.hook_ran()) << "y was queued during the Flush";
  EXPECT_EQ(removed, 3u) << "w, x and y";
  EXPECT_TRUE(e->GetValue("y").status().IsNotFound()) << "a cleared value came back";
  ASSERT_OK_AND_ASSIGN(uint64_t n, e->CountValues());
  EXPECT_EQ(n, 0u);
}

// Holds the thread making the next SSD segment write that carries `marker`
// until Release().
class HeldWriteFileSystem final : public SegmentWriteFileSystem {
 public:
  void HoldNextWriteOf(std::string marker) {
    std::lock_guard<std::mutex> lock(mu_);
    marker_ = std::move(marker);
    held_ = released_ = false;
  }
  void WaitUntilHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return held_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  Status OnSegmentWrite(std::string_view bytes) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (marker_.empty() || bytes.find(marker_) == std::string_view::npos) {
      return Status::OK();
    }
    marker_.clear();
    held_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_; });
    return Status::OK();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::string marker_;     // GUARDED_BY(mu_)
  bool held_ = false;      // GUARDED_BY(mu_)
  bool released_ = false;  // GUARDED_BY(mu_)
};

// A whole-space walk (DBSIZE, KEYS, FLUSHDB) walked the RAM tier, then the
// SSD tier's queue and index; a dirty value the hot tier had let go of but
// whose hand-over to the SSD tier (the eviction listener's call) had not
// ended was in none of them: DBSIZE undercounted, and FLUSHDB answered OK
// and the value, written below afterwards, was served again by GET.
// Deterministic: an engine Flush writing the value is held at its segment
// write, a memory charge evicts the value's RAM copy meanwhile, whose
// hand-over waits for that write (one write below per key at a time); the
// walk, started then, is given 200 ms and must wait for the hand-over.
TEST_F(EngineTest, AWholeSpaceWalkSeesAValueBeingHandedToTheSsdTier) {
  HeldWriteFileSystem fs;
  EngineHooks hooks;
  hooks.configure_ssd = [&](SsdTierOptions& o) { o.file_system = &fs; };
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Engine> e, OpenEngine(Quiet(OnDisk()), hooks));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<MemoryCharge> charge,
                       e->OpenMemoryCharge("other"));
  SharedHotBudget* budget = EngineHotBudget(*e);
  ASSERT_NE(budget, nullptr);
  // Stores `name` (in RAM only) and runs `walk` while its RAM copy is
  // being handed below; returns the walk's answer and whether it came
  // before the hand-over ended.
  const auto walk_during_hand_over = [&](const std::string& name, auto walk) {
    const std::string value = "value-of-" + name;
    EXPECT_OK(e->PutValue(name, SharedBytes::Copy(std::string_view(value))));
    fs.HoldNextWriteOf(value);
    std::future<Status> flushed =
        std::async(std::launch::async, [&] { return e->Flush(); });
    fs.WaitUntilHeld();
    const uint64_t evictions = budget->Totals().evictions;
    std::future<Status> charged = std::async(std::launch::async, [&] {
      return charge->Charge(charge->limit_bytes(), nullptr);
    });
    EXPECT_TRUE(
        testing::WaitUntil([&] { return budget->Totals().evictions > evictions; }));
    std::future<StatusOr<uint64_t>> walked = std::async(std::launch::async, walk);
    const bool before =
        walked.wait_for(std::chrono::milliseconds(200)) == std::future_status::ready;
    fs.Release();
    EXPECT_OK(flushed.get());
    EXPECT_OK(charged.get());
    EXPECT_OK(charge->Uncharge(charge->charged_bytes()));
    StatusOr<uint64_t> answer = walked.get();
    EXPECT_OK(answer);
    return std::pair<uint64_t, bool>(answer.ok() ? *answer : 0, before);
  };
  const auto [counted, counted_before] =
      walk_during_hand_over("a", [&] { return e->CountValues(); });
  EXPECT_EQ(counted, 1u) << "DBSIZE missed a value on its way to the SSD tier";
  EXPECT_FALSE(counted_before) << "counted before the hand-over ended";
  const auto [cleared, cleared_before] =
      walk_during_hand_over("b", [&] { return e->ClearValues(); });
  EXPECT_EQ(cleared, 2u) << "a and b";
  EXPECT_FALSE(cleared_before) << "cleared before the hand-over ended";
  EXPECT_TRUE(e->GetValue("b").status().IsNotFound()) << "a cleared value came back";
  ASSERT_OK_AND_ASSIGN(uint64_t n, e->CountValues());
  EXPECT_EQ(n, 0u);
}

// DBSIZE counts a RAM key unless its walk of the SSD tier counted it. It
// asked the SSD tier about each RAM key after that walk, so a value evicted
// from RAM in between (handed below once the walk had looked) counted in
// neither. Deterministic: the hook after the walk evicts every RAM block.
TEST_F(EngineTest, DbsizeCountsAValueEvictedAfterItsWalkOfTheSsdTier) {
  std::shared_ptr<MemoryCharge> charge;
  bool evict = true;
  EngineHooks hooks;
  hooks.after_count_values_ssd_walk = [&] {
    if (!std::exchange(evict, false)) return;
    EXPECT_OK(charge->Charge(charge->limit_bytes(), nullptr));  // every RAM block goes
  };
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Engine> e, OpenEngine(Quiet(OnDisk()), hooks));
  ASSERT_OK_AND_ASSIGN(charge, e->OpenMemoryCharge("other"));
  ASSERT_OK(e->PutValue("a", SharedBytes::Copy("value-of-a")));  // in RAM only
  ASSERT_OK_AND_ASSIGN(uint64_t n, e->CountValues());
  EXPECT_EQ(n, 1u) << "DBSIZE missed a value evicted while it counted";
  EXPECT_FALSE(evict) << "the hook never ran";
  ASSERT_OK(charge->Uncharge(charge->charged_bytes()));
  ASSERT_OK_AND_ASSIGN(n, e->CountValues());
  EXPECT_EQ(n, 1u);
}

// An expiring value: gone on the engine's clock, and still gone after a
// restart (the expiry is stored with the value), while one that has time
// left keeps it and one without expiry keeps none.
TEST_F(EngineTest, ValuesExpireOnTheEngineClockAcrossARestart) {
  FakeClock& clock = clock_;
  const EngineOptions o = OnDiskOnFakeClock();
  const uint64_t t0 = clock.UnixMillis();
  {
    auto e = Open(o);
    ASSERT_NE(e, nullptr);
    ASSERT_OK(
        e->SetValue("short", SharedBytes::Copy("s"), {.expires_at_unix_ms = t0 + 1000})
            .status());
    ASSERT_OK(
        e->SetValue("long", SharedBytes::Copy("l"), {.expires_at_unix_ms = t0 + 10000})
            .status());
    ASSERT_OK(e->PutValue("forever", SharedBytes::Copy("f")));
    EXPECT_EQ(e->ValueTtlMillis("short").value(), 1000);
    EXPECT_EQ(e->ValueTtlMillis("forever").value(), -1);
    EXPECT_EQ(e->ValueTtlMillis("absent").value(), -2);
    clock.AdvanceMillis(999);
    ASSERT_OK_AND_ASSIGN(SharedBytes v, e->GetValue("short"));
    EXPECT_EQ(v.view(), "s");
  }
  clock.AdvanceMillis(1);  // "short" expires while the engine is closed
  auto e = Open(o);
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->GetValue("short").status().IsNotFound());
  EXPECT_FALSE(e->ContainsValue("short"));
  EXPECT_EQ(e->ValueTtlMillis("short").value(), -2);
  EXPECT_EQ(e->ValueTtlMillis("long").value(), 9000);
  // The deadline itself (PEXPIRETIME), as stored.
  EXPECT_EQ(e->ValueExpiresAtMillis("long").value(), static_cast<int64_t>(t0 + 10000));
  EXPECT_EQ(e->ValueExpiresAtMillis("forever").value(), -1);
  EXPECT_EQ(e->ValueExpiresAtMillis("short").value(), -2);
  EXPECT_EQ(e->GetValue("long").value().view(), "l");
  EXPECT_EQ(e->ValueTtlMillis("forever").value(), -1);
  // PERSIST, then an expiry in the past (removes it), then KEEPTTL.
  ASSERT_OK_AND_ASSIGN(bool changed, e->SetValueExpiry("long", 0));
  EXPECT_TRUE(changed);
  EXPECT_EQ(e->ValueTtlMillis("long").value(), -1);
  ASSERT_OK_AND_ASSIGN(changed, e->SetValueExpiry("forever", t0));
  EXPECT_TRUE(changed);
  EXPECT_FALSE(e->ContainsValue("forever"));
  ASSERT_OK(e->SetValueExpiry("long", t0 + 5000).status());
  ASSERT_OK(e->SetValue("long", SharedBytes::Copy("l2"), {.keep_ttl = true}).status());
  EXPECT_EQ(e->ValueTtlMillis("long").value(), 4000);
  ASSERT_OK(e->PutValue("long", SharedBytes::Copy("l3")));  // a plain SET clears it
  EXPECT_EQ(e->ValueTtlMillis("long").value(), -1);
}

std::string OldValue(const SetValueResult& r) {
  return r.old.has_value() ? std::string(r.old->view()) : "<none>";
}

// SET NX from many threads at once: exactly one writer wins each key, and
// the value it wrote is the one stored (the check and the write are one step).
TEST_F(EngineTest, ConcurrentSetIfAbsentHasExactlyOneWinnerPerKey) {
  auto e = Open(OnDisk());
  ASSERT_NE(e, nullptr);
  constexpr int kThreads = 8, kKeys = 1000;
  std::vector<std::vector<int>> won(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kKeys; ++k) {
        StatusOr<SetValueResult> r =
            e->SetValue("nx:" + std::to_string(k), SharedBytes::Copy(std::to_string(t)),
                        {.condition = SetValueOptions::Condition::kIfAbsent});
        if (r.ok() && r->written) won[t].push_back(k);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  std::vector<int> winners(kKeys, 0);
  for (int t = 0; t < kThreads; ++t) {
    for (int k : won[t]) {
      ++winners[k];
      EXPECT_EQ(e->GetValue("nx:" + std::to_string(k)).value().view(), std::to_string(t));
    }
  }
  EXPECT_EQ(std::count(winners.begin(), winners.end(), 1), kKeys);
}

// SET's conditions and GET, and EXPIRE's, as Redis answers them.
TEST_F(EngineTest, SetValueAndSetValueExpiryHonourTheirConditions) {
  FakeClock& clock = clock_;
  const EngineOptions o = OnDiskOnFakeClock();
  auto e = Open(o);
  ASSERT_NE(e, nullptr);
  using Condition = SetValueOptions::Condition;
  const uint64_t t0 = clock.UnixMillis();
  // Declared first: GCC 12's -Wmaybe-uninitialized took the optional `old`
  // of a result made by the macro for uninitialized.
  SetValueResult r;
  ASSERT_OK_AND_ASSIGN(
      r, e->SetValue("k", SharedBytes::Copy("1"), {.condition = Condition::kIfPresent}));
  EXPECT_FALSE(r.written);
  ASSERT_OK_AND_ASSIGN(
      r, e->SetValue("k", SharedBytes::Copy("1"),
                     {.condition = Condition::kIfAbsent, .return_old = true}));
  EXPECT_TRUE(r.written);
  EXPECT_EQ(OldValue(r), "<none>");
  ASSERT_OK_AND_ASSIGN(
      r, e->SetValue("k", SharedBytes::Copy("2"),
                     {.condition = Condition::kIfAbsent, .return_old = true}));
  EXPECT_FALSE(r.written);
  EXPECT_EQ(OldValue(r), "1");
  ASSERT_OK_AND_ASSIGN(r, e->SetValue("k", SharedBytes::Copy("3"), {.return_old = true}));
  EXPECT_EQ(OldValue(r), "1");
  EXPECT_EQ(e->GetValue("k").value().view(), "3");
  EXPECT_FALSE(e->SetValueExpiry("k", t0 + 100, ExpiryCondition::kIfSet).value());
  EXPECT_FALSE(e->SetValueExpiry("k", t0 + 100, ExpiryCondition::kIfLater).value());
  EXPECT_TRUE(e->SetValueExpiry("k", t0 + 100, ExpiryCondition::kIfEarlier).value());
  EXPECT_FALSE(e->SetValueExpiry("k", t0 + 200, ExpiryCondition::kIfNone).value());
  EXPECT_FALSE(e->SetValueExpiry("k", t0 + 50, ExpiryCondition::kIfLater).value());
  EXPECT_TRUE(e->SetValueExpiry("k", t0 + 200, ExpiryCondition::kIfLater).value());
  EXPECT_TRUE(
      e->SetValueExpiry("k", t0 + 150, ExpiryCondition::kIfSetAndEarlier).value());
  EXPECT_EQ(e->ValueTtlMillis("k").value(), 150);
  EXPECT_FALSE(e->SetValueExpiry("absent", t0 + 100).value());
  clock.AdvanceMillis(150);  // expired: absent to a conditional SET
  ASSERT_OK_AND_ASSIGN(
      r, e->SetValue("k", SharedBytes::Copy("4"), {.condition = Condition::kIfAbsent}));
  EXPECT_TRUE(r.written);
  EXPECT_TRUE(e->SetValue(std::string(70000, 'n'), SharedBytes::Copy("x"), {})
                  .status()
                  .IsInvalidArgument());
}

// Owner ids are handed out per run in registration order, and the SSD tier
// keeps the id a block was written under. A block promoted from SSD after a
// restart is the reader's: the key-value space's value is charged to
// "values", the model's blocks to the model, whatever order this run
// registered them in (and the model's view, which pins only its own blocks,
// finds them).
TEST_F(EngineTest, APromotedBlockIsChargedToItsReaderAfterARestart) {
  const std::vector<int32_t> tokens = Tokens(2 * kBlockTokens);
  {
    auto e = Open(OnDisk());
    ASSERT_NE(e, nullptr);
    ASSERT_OK(e->PutValue("k", SharedBytes::Copy(std::string(1000, 'v'))));  // owner 0
    ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(testing::KvSpec("m")));  // 1
    StoreAll(*e, ns, tokens);
  }
  auto e = Open(OnDisk());
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(testing::KvSpec("m")));  // 0
  ASSERT_OK_AND_ASSIGN(SharedBytes v, e->GetValue("k"));  // "values" is 1
  EXPECT_EQ(v.size(), 1000u);
  EXPECT_EQ(MatchAndRestore(*e, ns, tokens).restored_tokens, tokens.size());
  std::map<std::string, uint64_t> hot_entries;
  for (const EngineOwnerStats& o : e->Stats().owners) hot_entries[o.name] = o.hot.entries;
  EXPECT_EQ(hot_entries["values"], 1u);
  EXPECT_EQ(hot_entries["m"], 2u);
  {
    // The model's view finds its promoted blocks: pinned in place.
    ASSERT_OK_AND_ASSIGN(MatchResult m, e->Match(ns, tokens));
    ASSERT_OK_AND_ASSIGN(PinnedRestore pinned, e->RestorePinned(m));
    ASSERT_EQ(pinned.blocks.size(), 2u);
    for (const RestoredBlock& b : pinned.blocks) {
      EXPECT_EQ(b.level, TierLevel::kHot);
      EXPECT_NE(b.pin, nullptr);
    }
  }
  ASSERT_OK_AND_ASSIGN(EngineAudit audit, e->Audit());
  EXPECT_TRUE(audit.ok());
}

// The SSD tier's per-owner series follow the owner, not this run's owner id
// (docs/metrics.md "Labels"): a restart that registers the owners in another
// order (and a memory charge first) still shows each model's and the key-value
// space's blocks, bytes and inserts under its own name, and a store after it
// counts for its owner.
TEST_F(EngineTest, SsdCountersFollowTheirOwnersAcrossAReorderedRestart) {
  const auto ssd_by_name = [](Engine& e) {
    std::map<std::string, TierCounters> out;
    for (const EngineOwnerStats& o : e.Stats().owners) out[o.name] = o.ssd;
    return out;
  };
  std::map<std::string, TierCounters> before;
  {
    auto e = Open(OnDisk());
    ASSERT_NE(e, nullptr);
    ASSERT_OK_AND_ASSIGN(Namespace a, e->RegisterModel(testing::KvSpec("a")));  // 0
    ASSERT_OK_AND_ASSIGN(Namespace b, e->RegisterModel(testing::KvSpec("b")));  // 1
    StoreAll(*e, a, Tokens(kBlockTokens));
    StoreAll(*e, b, Tokens(3 * kBlockTokens, 100));
    ASSERT_OK(e->PutValue("k", SharedBytes::Copy(std::string(700, 'v'))));  // 2
    ASSERT_OK(e->Flush());
    before = ssd_by_name(*e);
    ASSERT_GT(before["a"].entries, 0u);
    ASSERT_NE(before["a"].entries, before["b"].entries);
    ASSERT_EQ(before["values"].entries, 1u);
  }
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run);
    auto e = Open(OnDisk());
    ASSERT_NE(e, nullptr);
    ASSERT_OK_AND_ASSIGN(std::shared_ptr<MemoryCharge> charge,
                         e->OpenMemoryCharge("sessions"));  // 0
    // "values" is 1; the value in RAM until the flush below.
    ASSERT_OK(e->PutValue("k" + std::to_string(run + 2), SharedBytes::Copy("w")));
    ASSERT_OK_AND_ASSIGN(Namespace b, e->RegisterModel(testing::KvSpec("b")));  // 2
    ASSERT_OK_AND_ASSIGN(Namespace a, e->RegisterModel(testing::KvSpec("a")));  // 3
    std::map<std::string, TierCounters> now = ssd_by_name(*e);
    for (const std::string name : {"a", "b", "values"}) {
      SCOPED_TRACE(name);
      EXPECT_EQ(now[name].entries, before[name].entries);
      EXPECT_EQ(now[name].bytes, before[name].bytes);
      EXPECT_EQ(now[name].inserts, before[name].inserts);
    }
    EXPECT_EQ(now["sessions"], TierCounters{});
    ASSERT_OK_AND_ASSIGN(EngineAudit audit, e->Audit());
    EXPECT_TRUE(audit.ok());
    if (run == 1) break;
    // Written in this run: counted for "a", whose id is 3 now.
    StoreAll(*e, a, Tokens(2 * kBlockTokens, 1000));
    ASSERT_OK(e->Flush());
    (void)b;
    now = ssd_by_name(*e);
    EXPECT_GT(now["a"].entries, before["a"].entries);
    EXPECT_EQ(now["b"].entries, before["b"].entries);
    EXPECT_EQ(now["values"].entries, before["values"].entries + 1);  // "k2"
    before = now;
  }
}

// An SSD miss of an absent block is its reader's, as a hot miss is: GETs of
// absent values count in `values`' SSD misses, never in the model that took
// the SSD tier's stored id 0 by registering first (they did, before).
TEST_F(EngineTest, SsdMissesOfAbsentBlocksCountForTheirReader) {
  auto e = Open(OnDisk());
  ASSERT_NE(e, nullptr);
  ASSERT_OK(e->RegisterModel(testing::KvSpec("a")).status());  // stored id 0
  ASSERT_OK(e->PutValue("k", SharedBytes::Copy("v")));
  ASSERT_OK(e->Flush());
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(e->GetValue("absent" + std::to_string(i)).status().IsNotFound());
  }
  const EngineStats s = e->Stats();
  std::map<std::string, TierCounters> ssd, hot;
  for (const EngineOwnerStats& o : s.owners) ssd[o.name] = o.ssd, hot[o.name] = o.hot;
  EXPECT_EQ(ssd["a"].misses, 0u);
  ASSERT_GT(hot["values"].misses, 0u);
  EXPECT_EQ(ssd["values"].misses, hot["values"].misses);  // each went on to SSD
  EXPECT_EQ(s.ssd.misses, ssd["values"].misses);
}

// Damages the first byte of every copy of `bytes` in the segment files of
// the SSD tier at `path` (a compaction's move leaves the older extent behind
// until its segment goes); how many it damaged. REQUIRES: no compaction is
// copying them (QuiesceSsdReclaim).
int DamageEveryCopyOnDisk(const std::filesystem::path& path, std::string_view bytes) {
  int damaged = 0;
  for (const auto& f : std::filesystem::directory_iterator(path / "segments")) {
    if (f.path().extension() != ".seg") continue;
    std::fstream seg(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    const std::string file(std::istreambuf_iterator<char>(seg), {});
    for (size_t at = file.find(bytes); at != std::string::npos;
         at = file.find(bytes, at + 1)) {
      seg.seekp(static_cast<std::streamoff>(at));
      seg.put(static_cast<char>(file[at] ^ 0x40));
      ++damaged;
    }
  }
  return damaged;
}

// Drains the SSD write-back queue, then waits for the reclaimer's pass in
// flight and runs one itself (SsdTier::Compact): no sealed segment is left
// sparse, so no compaction has read a block that DamageEveryCopyOnDisk
// damages next. Without it a pass could read a block, the damage miss its
// copy still being written, and the copy be served intact (the damaged block
// restored) or, read after the damage, be dropped as corrupt before the
// caller took its "before" counters. One that starts after the damage (when
// a restore's evictions or drops leave garbage) can only find the block
// damaged, drop it and count its corruption, and its reader then misses as
// it would have: the callers take their counters before the damage.
void QuiesceSsdReclaim(Engine& e) {
  ASSERT_OK(EngineSsdTier(e)->Flush());
  ASSERT_OK(EngineSsdTier(e)->Compact());
}

// The counters of one engine run as a seeded random run recomputes them:
// per model, the tokens Match was asked and found and Restore read from each
// tier, the blocks read from each tier, and the restores timed; `ssd_at_open`
// are the model's SSD counters as the run found them (they persist).
struct RunTally {
  PrefixTokenCounters tokens;
  uint64_t blocks_from_hot = 0, blocks_from_ssd = 0, restores = 0;
  uint64_t damaged_reads = 0;  // blocks a restore found damaged on SSD
  uint64_t reshaped_reads = 0;  // blocks a restore found of other shapes
  TierCounters ssd_at_open;
};

// Each owner's SSD blocks and payload bytes, recomputed from the tier's index
// walk (this run's owner ids).
std::map<OwnerId, TierCounters> SsdContentsByOwner(Engine& e) {
  std::map<OwnerId, TierCounters> out;
  EngineSsdTier(e)->ForEach([&](const BlockMeta& meta, uint64_t bytes) {
    out[meta.owner].entries += 1;
    out[meta.owner].bytes += bytes;
  });
  return out;
}

// Restores `match` (of `prompt`) and tallies its Match's and its own counts.
StatusOr<RestoreResult> RestoreTallied(Engine& e, const std::vector<int32_t>& prompt,
                                       const MatchResult& match, RunTally* t) {
  t->tokens.query_tokens += prompt.size();
  t->tokens.hit_tokens += match.matched_tokens();
  PKV_ASSIGN_OR_RETURN(RestoreResult r, e.Restore(match));
  t->tokens.restored_tokens_hot += r.tokens_from_hot;
  t->tokens.restored_tokens_ssd += r.tokens_from_ssd;
  t->restores += 1;
  t->blocks_from_hot += r.blocks_from_hot;
  t->blocks_from_ssd += r.blocks_from_ssd;
  return r;
}

// Damages on disk one block of `prompt`'s match that only the SSD tier holds
// (none: nothing happens), then restores the match: the restore ends before
// that block, which it read once (a miss in RAM, a miss and a corruption on
// SSD) and the SSD tier dropped.
void DamageABlockOnSsdAndRestore(Engine& e, const std::filesystem::path& data_dir,
                                 Namespace ns, const std::vector<int32_t>& prompt,
                                 std::mt19937_64& rng, RunTally* t) {
  ASSERT_OK(EngineSsdTier(e)->Flush());
  ASSERT_OK_AND_ASSIGN(MatchResult match, e.Match(ns, prompt));
  if (match.keys.empty()) {
    ASSERT_OK(RestoreTallied(e, prompt, match, t).status());
    return;
  }
  const size_t i = rng() % match.keys.size();
  const BlockKey key = match.keys[i];
  if (EngineTiers(e, ns)->Locate(key) != TierLevel::kSsd) {
    ASSERT_OK(RestoreTallied(e, prompt, match, t).status());
    return;
  }
  ASSERT_OK_AND_ASSIGN(SharedBytes stored, EngineSsdTier(e)->PeekIntact(key));
  // 16 bytes of its random KV, past the record's header.
  const std::string_view bytes = stored.view().substr(stored.size() / 2, 16);
  ASSERT_NO_FATAL_FAILURE(QuiesceSsdReclaim(e));  // moves no block out of the SSD tier
  const TierCounters ssd_before = e.Stats().ssd;
  ASSERT_GT(DamageEveryCopyOnDisk(data_dir, bytes), 0);
  ASSERT_OK_AND_ASSIGN(RestoreResult r, RestoreTallied(e, prompt, match, t));
  EXPECT_EQ(r.restored_blocks, i) << r.reason;
  EXPECT_FALSE(EngineSsdTier(e)->Contains(key)) << "the damaged block is dropped";
  EXPECT_EQ(e.Stats().ssd.corruptions, ssd_before.corruptions + 1);
  t->damaged_reads += 1;
}

// KvSpec(model) with the shapes of KvLayers: 2 KV heads of 8.
NamespaceSpec ShapedKvSpec(const std::string& model) {
  NamespaceSpec spec = KvSpec(model);
  spec.layer_shapes = ParseLayerShapes("2x8,2x8").value();
  return spec;
}

// KvLayers of `prompt` with KV of 1 head, which ShapedKvSpec refuses.
std::vector<LayerState> OneHeadKvLayers(size_t tokens, std::mt19937_64& rng) {
  std::vector<LayerState> layers = KvLayers(2, static_cast<int64_t>(tokens), rng);
  for (LayerState& l : layers) {
    for (Tensor& t : l.tensors) t = Tensor::Filled(DType::kFloat32, {1, 1, t.dim(2), 8}, 1);
  }
  return layers;
}

// A store of `prompt` with KV of other shapes than the spec's: refused,
// nothing written, one refused store of the model.
void StoreOfOtherShapesRefused(Engine& e, Namespace ns, const std::vector<int32_t>& prompt,
                               std::mt19937_64& rng, RunTally* t) {
  const uint64_t inserts = e.Stats().hot.inserts;
  EXPECT_TRUE(e.Store(ns, prompt, OneHeadKvLayers(prompt.size(), rng))
                  .status()
                  .IsInvalidArgument());
  EXPECT_EQ(e.Stats().hot.inserts, inserts) << "a refused store wrote";
  t->tokens.shape_refused_stores += 1;
}

// Rewrites one block of `prompt`'s match (none: nothing happens) with KV of
// one head, as an older binary or a node of one could have left it, then
// restores the match, or reads that block as a served restore's PKV.GET does
// (GetBlock with the blocks matched after it): either reads that block where
// it lies, never serves it (the restore ends before it, the read is a miss),
// refuses its tokens and the matched tokens after it, and drops them.
void ReshapeABlockAndRestore(Engine& e, Namespace ns, const std::vector<int32_t>& prompt,
                             std::mt19937_64& rng, RunTally* t) {
  ASSERT_OK_AND_ASSIGN(MatchResult match, e.Match(ns, prompt));
  if (match.keys.empty()) {
    ASSERT_OK(RestoreTallied(e, prompt, match, t).status());
    return;
  }
  const size_t i = rng() % match.keys.size();
  TierStack* stack = EngineTiers(e, ns);
  const BlockKey key = match.keys[i];
  ASSERT_OK_AND_ASSIGN(BlockMeta meta, stack->Peek(key));
  ASSERT_OK_AND_ASSIGN(TierHit hit, stack->PeekPayload(key));
  ASSERT_OK_AND_ASSIGN(BlockRecord rec, DecodeBlock(hit.payload));
  for (LayerState& l : rec.layers) {
    for (Tensor& x : l.tensors) x = Tensor::Filled(DType::kFloat32, {1, 1, kBlockTokens, 8}, 1);
  }
  ASSERT_OK_AND_ASSIGN(SharedBytes reshaped, EncodeBlock(rec));
  ASSERT_OK(stack->Rewrite(meta, reshaped));
  const TierLevel at = stack->Locate(key);
  if (rng() % 2 == 0) {
    const std::span<const BlockKey> after = std::span(match.keys).subspan(i + 1);
    const StatusOr<SharedBytes> got = e.GetBlock(
        ns, key, {.keys = after, .tokens = match.matched_tokens() - (i + 1) * kBlockTokens});
    EXPECT_TRUE(got.status().IsNotFound()) << "served a block of other shapes";
    t->tokens.query_tokens += prompt.size();
    t->tokens.hit_tokens += match.matched_tokens();
    for (const BlockKey& k : after) EXPECT_FALSE(stack->Contains(k)) << "matched after it";
  } else {
    ASSERT_OK_AND_ASSIGN(RestoreResult r, RestoreTallied(e, prompt, match, t));
    EXPECT_EQ(r.restored_blocks, i) << r.reason;
  }
  EXPECT_FALSE(stack->Contains(key)) << "the block of other shapes is dropped";
  (at == TierLevel::kHot ? t->blocks_from_hot : t->blocks_from_ssd) += 1;
  t->tokens.shape_refused_tokens += match.matched_tokens() - i * kBlockTokens;
  t->reshaped_reads += 1;
}

// Checks every counter a user reads against the run's tally and the tiers'
// contents: per-model token counters and restore counts, the hot tier's
// owners summing to its totals, the SSD tier's per-owner and total blocks and
// bytes against its contents, the raw values DBSIZE counts; the audit is clean.
void ExpectCountersRecomputed(Engine& e, const std::map<std::string, RunTally>& tally,
                              uint64_t values, bool blocks_damaged = false) {
  ASSERT_OK(e.Flush());
  const EngineStats s = e.Stats();
  TierCounters hot_sum;
  const std::map<OwnerId, TierCounters> ssd = SsdContentsByOwner(e);
  TierCounters ssd_sum;
  for (OwnerId id = 0; id < s.owners.size(); ++id) {
    const EngineOwnerStats& o = s.owners[id];
    SCOPED_TRACE(o.name);
    AddTierCounters(&hot_sum, o.hot);
    const auto on_ssd = ssd.find(id);
    const TierCounters contents = on_ssd == ssd.end() ? TierCounters{} : on_ssd->second;
    EXPECT_EQ(o.ssd.entries, contents.entries);
    EXPECT_EQ(o.ssd.bytes, contents.bytes);
    AddTierCounters(&ssd_sum, contents);
    const auto t = tally.find(o.name);
    if (t == tally.end()) continue;
    ASSERT_TRUE(o.prefix_tokens.has_value());
    EXPECT_EQ(o.prefix_tokens->query_tokens, t->second.tokens.query_tokens);
    EXPECT_EQ(o.prefix_tokens->hit_tokens, t->second.tokens.hit_tokens);
    EXPECT_EQ(o.prefix_tokens->restored_tokens_hot, t->second.tokens.restored_tokens_hot);
    EXPECT_EQ(o.prefix_tokens->restored_tokens_ssd, t->second.tokens.restored_tokens_ssd);
    EXPECT_EQ(o.prefix_tokens->shape_refused_stores,
              t->second.tokens.shape_refused_stores);
    EXPECT_EQ(o.prefix_tokens->shape_refused_tokens,
              t->second.tokens.shape_refused_tokens);
    EXPECT_EQ(o.restore_latency->count(), t->second.restores);
    // One thread: every block Match found is read where it found it, a block
    // on SSD after a hot miss; a read of the model misses on SSD only for a
    // block damaged there, a corruption.
    const RunTally& r = t->second;
    EXPECT_EQ(o.hot.hits, r.blocks_from_hot);
    EXPECT_EQ(o.hot.misses, r.blocks_from_ssd + r.damaged_reads);
    EXPECT_EQ(o.ssd.hits - r.ssd_at_open.hits, r.blocks_from_ssd);
    EXPECT_EQ(o.ssd.misses - r.ssd_at_open.misses, r.damaged_reads);
    EXPECT_EQ(o.ssd.corruptions - r.ssd_at_open.corruptions, r.damaged_reads);
  }
  EXPECT_EQ(hot_sum, s.hot);
  EXPECT_EQ(s.ssd.entries, ssd_sum.entries);  // every SSD owner is registered
  EXPECT_EQ(s.ssd.bytes, ssd_sum.bytes);
  ASSERT_OK_AND_ASSIGN(uint64_t counted, e.CountValues());
  EXPECT_EQ(counted, values);
  ASSERT_OK_AND_ASSIGN(EngineAudit audit, e.Audit());
  for (const AuditFinding& f : audit.findings)
    ADD_FAILURE() << f.what << ": " << f.detail;
  // A block dropped as damaged leaves the blocks after it in its chain
  // without a parent.
  if (!blocks_damaged) {
    EXPECT_TRUE(audit.orphans.empty()) << audit.orphans.size() << " orphans";
  }
}

// Every SSD counter of every owner, by name, and the tier's: what a clean
// restart must give back (they persist with the blocks).
std::map<std::string, TierCounters> SsdCountersByName(const EngineStats& s) {
  std::map<std::string, TierCounters> out = {{"", s.ssd}};
  for (const EngineOwnerStats& o : s.owners) out[o.name] = o.ssd;
  return out;
}

// The key-value space's hot and SSD counters ("values"; zero before its
// first value operation registers it).
std::pair<TierCounters, TierCounters> ValuesCounters(const EngineStats& s) {
  for (const EngineOwnerStats& o : s.owners) {
    if (o.name == "values") return {o.hot, o.ssd};
  }
  return {};
}

// One GET is one lookup, counted as the model says it must be: a value RAM
// holds is a hot hit; any other a hot miss that goes on to SSD, a hit there
// when the value is present, a miss when it is absent. Nothing else counts.
void ExpectAGetCountedOnce(const EngineStats& before, const EngineStats& after,
                           bool present) {
  const auto [hot0, ssd0] = ValuesCounters(before);
  const auto [hot1, ssd1] = ValuesCounters(after);
  EXPECT_EQ(hot1.hits + hot1.misses, hot0.hits + hot0.misses + 1) << "hot lookups";
  EXPECT_EQ(ssd1.hits + ssd1.misses,
            ssd0.hits + ssd0.misses + (hot1.misses - hot0.misses))
      << "SSD lookups: one per hot miss";
  EXPECT_EQ(hot1.hits - hot0.hits + ssd1.hits - ssd0.hits, present ? 1u : 0u) << "hits";
  EXPECT_EQ(after.hot.hits + after.hot.misses, before.hot.hits + before.hot.misses + 1);
}

// A GET of a value whose only copy, on SSD, was damaged: one lookup, a miss
// in RAM and on SSD (ExpectAGetCountedOnce), one checksum failure there, and
// the record dropped (its entry and bytes leave the SSD tier; no remove,
// eviction or insert is counted).
void ExpectADamagedValueDropped(const EngineStats& before, const EngineStats& after) {
  ExpectAGetCountedOnce(before, after, /*present=*/false);
  const auto [hot0, ssd0] = ValuesCounters(before);
  const auto [hot1, ssd1] = ValuesCounters(after);
  EXPECT_EQ(ssd1.corruptions, ssd0.corruptions + 1);
  EXPECT_EQ(after.ssd.corruptions, before.ssd.corruptions + 1);
  EXPECT_EQ(ssd1.entries + 1, ssd0.entries);
  EXPECT_EQ(after.ssd.entries + 1, before.ssd.entries);
  EXPECT_LT(ssd1.bytes, ssd0.bytes);
  EXPECT_EQ(ssd0.bytes - ssd1.bytes, before.ssd.bytes - after.ssd.bytes);
  for (const auto& [c0, c1] : {std::pair{hot0, hot1}, std::pair{ssd0, ssd1}}) {
    EXPECT_EQ(c1.removes, c0.removes);
    EXPECT_EQ(c1.evictions, c0.evictions);
    EXPECT_EQ(c1.inserts, c0.inserts);
  }
}

// What holds between the counters of one Stats() whatever ran: the hot
// owners add up to the totals; every dirty victim is counted once by SSD
// admission, as written or skipped (tier_types.h), and was an eviction; the
// budget is kept; no read ahead is counted twice; no model hit more tokens
// than it was asked.
void ExpectIdentities(const EngineStats& s) {
  TierCounters sum;
  for (const EngineOwnerStats& o : s.owners) AddTierCounters(&sum, o.hot);
  EXPECT_EQ(sum, s.hot);
  const SsdAdmissionCounters& a = s.ssd_admission_counters;
  EXPECT_EQ(s.hot.spills, a.written_blocks + a.skipped_blocks) << "spills vs admission";
  EXPECT_LE(s.hot.spills, s.hot.evictions);
  EXPECT_LE(s.hot.bytes, s.hot_capacity_bytes);
  EXPECT_LE(s.ssd_read_ahead_served + s.ssd_read_ahead_stale + s.ssd_read_ahead_unused,
            s.ssd_read_ahead_reads);
  for (const EngineOwnerStats& o : s.owners) {
    if (o.prefix_tokens) {
      EXPECT_LE(o.prefix_tokens->hit_tokens, o.prefix_tokens->query_tokens);
    }
  }
}

// A DEL, an EXPIRE or a FLUSHDB, with no SSD write-back queued, counts no
// lookup; `removed` keys present before it leave: each copy taken out of a
// tier is one remove there, so a tier's entries fall by its removes (nothing
// is inserted or evicted by a removal), and a key that was present is removed
// from at least one tier.
void ExpectARemovalCounted(const EngineStats& before, const EngineStats& after,
                           uint64_t removed) {
  const auto [hot0, ssd0] = ValuesCounters(before);
  const auto [hot1, ssd1] = ValuesCounters(after);
  for (const auto& [c0, c1] : {std::pair{hot0, hot1}, std::pair{ssd0, ssd1}}) {
    SCOPED_TRACE(&c0 == &hot0 ? "hot" : "ssd");
    EXPECT_EQ(c1.hits, c0.hits);
    EXPECT_EQ(c1.misses, c0.misses);
    EXPECT_EQ(c0.entries - c1.entries, c1.removes - c0.removes) << "entries by removes";
    EXPECT_EQ(c1.evictions, c0.evictions);
    EXPECT_EQ(c1.inserts, c0.inserts);
  }
  const uint64_t removes = hot1.removes - hot0.removes + ssd1.removes - ssd0.removes;
  EXPECT_GE(removes, removed);
  if (removed == 0) {
    EXPECT_EQ(removes, 0u);
  }
}

// A seeded random run (PREFIXKV_SEED to replay) of two models' stores and
// restores and raw values' SETs, GETs, DELs, EXPIREs, FLUSHDBs, GETs of
// values damaged on SSD (ExpectADamagedValueDropped) and restores of blocks
// damaged there (DamageABlockOnSsdAndRestore: each such read a miss and a
// corruption of its model, recounted), stores of KV of other shapes than the models'
// specs (StoreOfOtherShapesRefused) and restores or served reads (GetBlock) of a block
// rewritten with such KV (ReshapeABlockAndRestore: its tokens and those after it refused
// and dropped, the model's shape_refused_* recounted) under a hot tier of a dozen blocks (evictions,
// spills, promotions), with clean restarts: every counter users read is recomputed at
// each checkpoint (ExpectCountersRecomputed), every GET answers the value last SET, and
// the SSD tier's counters come back from a restart as they were; each GET counts one
// lookup in each tier it asks (ExpectAGetCountedOnce), each DEL, EXPIRE and FLUSHDB none
// and its removals (ExpectARemovalCounted), and the identities between counters hold
// after every step (ExpectIdentities).
TEST_F(EngineTest, CountersAgreeWithARecomputationOfARandomRun) {
  const uint64_t block_charge = OneBlockCharge();
  ASSERT_GT(block_charge, 0u);
  std::mt19937_64 rng(rng_());
  const std::vector<std::string> models = {"a", "b"};
  std::map<std::string, std::string> values;
  std::map<std::string, TierCounters> ssd_before;
  bool blocks_damaged = false;  // in this run or an earlier one
  for (int run = 0; run < 3; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    EngineOptions o = OnDisk(12 * block_charge);
    o.clock = &clock_;  // EXPIRE's times
    auto e = Open(o);
    ASSERT_NE(e, nullptr);
    std::map<std::string, RunTally> tally;  // counted from this open on
    std::vector<Namespace> ns;
    for (const std::string& m : models) {
      ASSERT_OK_AND_ASSIGN(Namespace n, e->RegisterModel(ShapedKvSpec(m)));
      ns.push_back(n);
      tally[m];
    }
    for (const EngineOwnerStats& o : e->Stats().owners) {
      if (tally.count(o.name) > 0) tally[o.name].ssd_at_open = o.ssd;
    }
    // The key-value space registers with its first value operation: a TTL of
    // a key never set, so the first GET's counts are a difference too.
    ASSERT_OK_AND_ASSIGN(int64_t ttl, e->ValueTtlMillis(""));
    ASSERT_EQ(ttl, -2);
    for (const auto& [name, c] : SsdCountersByName(e->Stats())) {
      if (run == 0) break;
      EXPECT_EQ(c, ssd_before[name]) << "ssd counters of '" << name << "'";
    }
    for (int op = 0; op < 120; ++op) {
      const size_t m = rng() % ns.size();
      // Prompts of 1 to 4 blocks from 6 chains of 4 per model.
      const std::vector<int32_t> prompt =
          Tokens((1 + rng() % 4) * kBlockTokens, 1000 * static_cast<int32_t>(rng() % 6));
      const std::string key = "k" + std::to_string(rng() % 8);
      const uint64_t kind = rng() % 10;
      SCOPED_TRACE("op " + std::to_string(op) + " kind " + std::to_string(kind) + " " +
                   key);
      switch (kind) {
        case 0:
        case 1:
          StoreAll(*e, ns[m], prompt);
          break;
        case 2: {
          ASSERT_OK_AND_ASSIGN(MatchResult match, e->Match(ns[m], prompt));
          ASSERT_OK(RestoreTallied(*e, prompt, match, &tally[models[m]]).status());
          break;
        }
        case 3: {
          const std::string v = std::to_string(rng()) + std::string(rng() % 3000, 'v');
          ASSERT_OK(e->PutValue(key, SharedBytes::Copy(v)));
          values[key] = v;
          break;
        }
        case 4: {
          const EngineStats before = e->Stats();
          StatusOr<SharedBytes> got = e->GetValue(key);
          ExpectAGetCountedOnce(before, e->Stats(), values.count(key) > 0);
          if (values.count(key) == 0) {
            EXPECT_TRUE(got.status().IsNotFound()) << key;
          } else {
            ASSERT_OK(got);
            EXPECT_EQ(got->view(), values[key]) << key;
          }
          break;
        }
        case 5: {
          // The write-back queue drained: no write lands during the removal.
          ASSERT_OK(EngineSsdTier(*e)->Flush());
          const EngineStats before = e->Stats();
          ASSERT_OK_AND_ASSIGN(bool deleted, e->DeleteValue(key));
          EXPECT_EQ(deleted, values.erase(key) > 0) << key;
          ExpectARemovalCounted(before, e->Stats(), deleted ? 1 : 0);
          break;
        }
        case 6: {  // EXPIRE: in the past it removes the key, else rewrites it
          const bool past = rng() % 2 == 0;
          const uint64_t now = clock_.UnixMillis();
          ASSERT_OK(EngineSsdTier(*e)->Flush());
          const EngineStats before = e->Stats();
          ASSERT_OK_AND_ASSIGN(bool changed,
                               e->SetValueExpiry(key, past ? now - 1 : now + 3'600'000));
          EXPECT_EQ(changed, values.count(key) > 0) << key;
          if (past) {
            ExpectARemovalCounted(before, e->Stats(), values.erase(key));
          } else {
            const auto [hot0, ssd0] = ValuesCounters(before);
            const auto [hot1, ssd1] = ValuesCounters(e->Stats());
            EXPECT_EQ(hot1.hits + hot1.misses, hot0.hits + hot0.misses) << "no lookup";
            EXPECT_EQ(ssd1.hits + ssd1.misses, ssd0.hits + ssd0.misses) << "no lookup";
          }
          break;
        }
        case 7: {  // now and then a FLUSHDB
          if (rng() % 4 != 0) break;
          ASSERT_OK(EngineSsdTier(*e)->Flush());
          const EngineStats before = e->Stats();
          ASSERT_OK_AND_ASSIGN(uint64_t cleared, e->ClearValues());
          EXPECT_EQ(cleared, values.size());
          ExpectARemovalCounted(before, e->Stats(), values.size());
          const auto [hot, ssd] = ValuesCounters(e->Stats());
          EXPECT_EQ(hot.entries + ssd.entries, 0u);
          values.clear();
          break;
        }
        case 8: {  // a value whose one copy, on SSD, is damaged, then read
          if (rng() % 2 == 0) {
            ASSERT_NO_FATAL_FAILURE(DamageABlockOnSsdAndRestore(
                *e, dir_.path(), ns[m], prompt, rng, &tally[models[m]]));
            break;
          }
          if (values.count(key) == 0) break;
          ASSERT_OK(EngineSsdTier(*e)->Flush());
          if (EngineTiers(*e, ns[0])->Locate(internal::ValueKey(key)) != TierLevel::kSsd)
            break;
          ASSERT_NO_FATAL_FAILURE(QuiesceSsdReclaim(*e));
          const EngineStats before = e->Stats();
          // Its first bytes: the random number only this SET wrote.
          ASSERT_GT(DamageEveryCopyOnDisk(dir_.path(), values[key].substr(0, 16)), 0);
          StatusOr<SharedBytes> got = e->GetValue(key);
          EXPECT_TRUE(got.status().IsNotFound()) << (got.ok() ? got->view() : "");
          ExpectADamagedValueDropped(before, e->Stats());
          values.erase(key);
          break;
        }
        case 9: {  // a store, or a cached block, of other shapes than the spec's
          if (rng() % 2 == 0) {
            StoreOfOtherShapesRefused(*e, ns[m], prompt, rng, &tally[models[m]]);
          } else {
            ASSERT_NO_FATAL_FAILURE(
                ReshapeABlockAndRestore(*e, ns[m], prompt, rng, &tally[models[m]]));
          }
          break;
        }
      }
      ExpectIdentities(e->Stats());
    }
    // A block dropped for its shapes leaves the blocks after it that the
    // match did not reach without a parent too.
    for (const auto& [m, t] : tally)
      blocks_damaged |= t.damaged_reads > 0 || t.reshaped_reads > 0;
    ExpectCountersRecomputed(*e, tally, values.size(), blocks_damaged);
    ssd_before = SsdCountersByName(e->Stats());
    EXPECT_GT(e->Stats().hot.evictions, 0u);
    ASSERT_OK(e->Close());
  }
}

// Runs load(0), load(1), ... on another thread while this one calls
// e.Stats() until `loads` loads ran or a Stats() was `torn`; the number of
// torn ones (0 or 1).
template <typename Load, typename Torn>
int TornStatsUnderLoad(Engine& e, int loads, Load load, Torn torn) {
  std::atomic<bool> done{false};
  std::atomic<int> ran{0};
  std::thread loader([&] {
    for (int32_t i = 0; !done.load(); ++i) {
      load(i);
      ran.fetch_add(1);
    }
  });
  int torn_stats = 0;
  while (ran.load() < loads && torn_stats == 0) {
    if (torn(e.Stats())) ++torn_stats;
  }
  done = true;
  loader.join();
  return torn_stats;
}

// One Stats() is one moment of the hot budget: its owners add up to its
// totals even while another thread stores, evicts and charges memory (a
// scrape read the totals and then each owner under a lock of its own, so
// under load the owners' bytes did not add up to prefixkv_tier_bytes).
TEST_F(EngineTest, StatsOwnersAddUpToTheTotalsUnderLoad) {
  const uint64_t block_charge = OneBlockCharge();
  ASSERT_GT(block_charge, 0u);
  auto e = Open({.hot_capacity_bytes = 8 * block_charge});
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace a, e->RegisterModel(KvSpec("a")));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<MemoryCharge> charge, e->OpenMemoryCharge("s"));
  std::mt19937_64 rng(rng_());
  const std::vector<LayerState> layers = KvLayers(2, 2 * kBlockTokens, rng);
  const int torn = TornStatsUnderLoad(
      *e, 4000,
      [&](int32_t i) {
        (void)e->Store(a, Tokens(2 * kBlockTokens, 10 * i), layers);
        uint64_t shortfall = 0;
        if (charge->Charge(block_charge, &shortfall).ok()) {
          (void)charge->Uncharge(block_charge);
        }
      },
      [](const EngineStats& s) {
        TierCounters sum;
        for (const EngineOwnerStats& o : s.owners) AddTierCounters(&sum, o.hot);
        return !(sum == s.hot);
      });
  EXPECT_EQ(torn, 0) << "a Stats() whose owners did not add up to its totals";
}

// The SSD tier's owners may add up to less than its totals (an earlier run's
// owner not registered again, docs/metrics.md), never to more: one Stats()
// copies the totals and every owner's counters at one moment, also while
// values are written through to the SSD tier and deleted on another thread.
TEST_F(EngineTest, StatsSsdOwnersNeverAddUpToMoreThanTheTotalsUnderLoad) {
  EngineOptions o = OnDisk();
  o.write_through = true;
  auto e = Open(o);
  ASSERT_NE(e, nullptr);
  const SharedBytes value = SharedBytes::Copy(std::string(512, 'v'));
  const int torn = TornStatsUnderLoad(
      *e, 2000,
      [&](int32_t i) {
        const std::string key = "k" + std::to_string(i % 8);
        (void)e->PutValue(key, value);
        (void)e->DeleteValue(key);
      },
      [](const EngineStats& s) {
        TierCounters sum;
        for (const EngineOwnerStats& owner : s.owners) AddTierCounters(&sum, owner.ssd);
        return sum.bytes > s.ssd.bytes || sum.entries > s.ssd.entries;
      });
  EXPECT_EQ(torn, 0) << "a Stats() whose SSD owners held more than the SSD tier";
}

// A wall clock that, once told to tick, moves one millisecond each time it
// is read: the system clock crosses a millisecond between any two reads of
// one call, so a key may expire between them.
class TickingClock final : public Clock {
 public:
  uint64_t NowNanos() const override { return fake_.NowNanos(); }
  uint64_t UnixMillis() const override {
    const uint64_t ms = fake_.UnixMillis();
    if (ticking_.load()) fake_.AdvanceMillis(1);
    return ms;
  }
  std::atomic<bool> ticking_{false};

 private:
  mutable FakeClock fake_;
};

// Runs `op` on another thread; a call still running after 30 s of real time
// is a deadlock, reported by aborting (the engine cannot be closed under it).
template <typename Op>
auto WithinDeadline(const char* what, Op op) {
  std::packaged_task<decltype(op())()> task(std::move(op));
  auto done = task.get_future();
  std::thread(std::move(task)).detach();
  if (done.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    std::fprintf(stderr, "%s deadlocked\n", what);
    std::abort();
  }
  return done.get();
}

// SET ... GET and EXPIRE read the key's value under its stripe after finding
// it present: a key that expires between the probe and that read must not
// make the read take the stripe again (a self-deadlock, also of every other
// key of that stripe). The value is read as of the probe's time.
TEST_F(EngineTest, AValueExpiringBetweenTheProbeAndTheReadIsNoDeadlock) {
  TickingClock clock;
  EngineOptions o;  // in RAM: no background thread reads the clock
  o.hot_capacity_bytes = 1 << 20;
  o.clock = &clock;
  auto e = Open(o);
  ASSERT_NE(e, nullptr);
  // Each key expires the millisecond after the next read of the clock, the
  // read of the call's probe.
  uint64_t t = clock.UnixMillis();
  ASSERT_OK(e->SetValue("a", SharedBytes::Copy("old-a"), {.expires_at_unix_ms = t + 1})
                .status());
  clock.ticking_ = true;
  StatusOr<SetValueResult> r = WithinDeadline("SET GET", [&] {
    return e->SetValue("a", SharedBytes::Copy("new-a"), {.return_old = true});
  });
  clock.ticking_ = false;
  ASSERT_OK(r);
  EXPECT_TRUE(r->written);
  EXPECT_EQ(OldValue(*r), "old-a") << "present when the SET's probe looked";
  t = clock.UnixMillis();
  ASSERT_OK(e->SetValue("b", SharedBytes::Copy("old-b"), {.expires_at_unix_ms = t + 1})
                .status());
  clock.ticking_ = true;
  StatusOr<bool> set =
      WithinDeadline("EXPIRE", [&] { return e->SetValueExpiry("b", t + 1000); });
  clock.ticking_ = false;
  ASSERT_OK(set);
  EXPECT_TRUE(*set) << "present when the EXPIRE's probe looked";
  ASSERT_OK_AND_ASSIGN(SharedBytes b, e->GetValue("b"));
  EXPECT_EQ(b.view(), "old-b");
  ASSERT_OK_AND_ASSIGN(SharedBytes a, e->GetValue("a"));
  EXPECT_EQ(a.view(), "new-a");
}

// Expired values leave without being read: each write sweeps a few, a sweep
// (DBSIZE's) the rest, also after a restart; the hot tier's bytes go with them.
TEST_F(EngineTest, ExpiredValuesAreReclaimedWithoutBeingRead) {
  FakeClock& clock = clock_;
  const EngineOptions o = OnDiskOnFakeClock();
  const uint64_t t0 = clock.UnixMillis();
  {
    auto e = Open(o);
    ASSERT_NE(e, nullptr);
    for (int i = 0; i < 10; ++i) {
      ASSERT_OK(e->SetValue("t" + std::to_string(i),
                            SharedBytes::Copy(std::string(1000, 'x')),
                            {.expires_at_unix_ms = t0 + 100})
                    .status());
    }
    clock.AdvanceMillis(100);
    ASSERT_OK(e->PutValue("writer", SharedBytes::Copy("w")));  // sweeps 4
    EXPECT_EQ(e->CountValues().value(), 7u);
    EXPECT_EQ(e->Stats().owners[0].hot.entries, 7u);
    ASSERT_OK_AND_ASSIGN(uint64_t removed, e->RemoveExpiredValues(100));
    EXPECT_EQ(removed, 6u);
    EXPECT_EQ(e->CountValues().value(), 1u);
    ASSERT_OK(
        e->SetValue("later", SharedBytes::Copy("l"), {.expires_at_unix_ms = t0 + 500})
            .status());
  }
  clock.AdvanceMillis(400);
  auto e = Open(o);  // "later" expired while closed; the sweep learns of it
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->CountValues().value(), 2u);
  ASSERT_OK_AND_ASSIGN(uint64_t removed, e->RemoveExpiredValues(100));
  EXPECT_EQ(removed, 1u);
  EXPECT_EQ(e->CountValues().value(), 1u);
  const EngineStats s = e->Stats();
  EXPECT_EQ(s.ssd.evictions, 0u) << "removed, not evicted";
}

// A walk (ScanValues) returns every key present for all of it at least once,
// while others come and go, and after a restart (names are stored).
TEST_F(EngineTest, AValueWalkReturnsEveryKeyPresentThroughout) {
  std::set<std::string> stable;
  {
    auto e = Open(OnDisk(/*hot_bytes=*/8 << 10));  // most values on SSD only
    ASSERT_NE(e, nullptr);
    for (int i = 0; i < 60; ++i) {
      const std::string k = "key:" + std::to_string(i);
      ASSERT_OK(e->PutValue(k, SharedBytes::Copy(std::string(500, 'v'))));
      stable.insert(k);
    }
  }
  auto e = Open(OnDisk(/*hot_bytes=*/8 << 10));
  ASSERT_NE(e, nullptr);
  std::set<std::string> seen;
  uint64_t cursor = 0;
  int page = 0;
  do {
    ASSERT_OK_AND_ASSIGN(ValueScanPage p, e->ScanValues(cursor, 7));
    seen.insert(p.keys.begin(), p.keys.end());
    cursor = p.next_cursor;
    // Churn between pages: new keys, and deleted ones leave `stable`.
    ASSERT_OK(e->PutValue("new:" + std::to_string(page), SharedBytes::Copy("n")));
    const std::string gone = "key:" + std::to_string(page * 3);
    ASSERT_OK(e->DeleteValue(gone).status());
    stable.erase(gone);
    ++page;
  } while (cursor != 0 && page < 1000);
  for (const std::string& k : stable) EXPECT_EQ(seen.count(k), 1u) << k;
  EXPECT_GT(page, 5);
}

// Values stored before value records (the bare bytes under the v2 key) still
// read, without expiry; a write replaces them with a record. A GET of such a
// value is one lookup, a hit (it counted the record's miss, then a second
// lookup's hit: two hot lookups for one GET).
TEST_F(EngineTest, ValuesOfTheOlderSchemeStillRead) {
  {
    SsdTierOptions so;
    so.path = dir_.str();
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<SsdTier> ssd, SsdTier::Open(so));
    HashStream h(HashStream::Width::k128);
    h.Update("prefixkv/raw/v2|old", 19);
    BlockMeta meta;
    meta.key = h.Digest128();
    ASSERT_OK(ssd->Put(meta, SharedBytes::Copy("old bytes"), /*dirty=*/false));
    ASSERT_OK(ssd->Close());
  }
  auto e = Open(OnDisk());
  ASSERT_NE(e, nullptr);
  ASSERT_OK(e->ValueTtlMillis("").status());  // registers the values' owner
  const EngineStats before = e->Stats();
  ASSERT_OK_AND_ASSIGN(SharedBytes v, e->GetValue("old"));
  EXPECT_EQ(v.view(), "old bytes");
  ExpectAGetCountedOnce(before, e->Stats(), /*present=*/true);
  EXPECT_EQ(e->ValueTtlMillis("old").value(), -1);
  ASSERT_OK_AND_ASSIGN(ValueScanPage p, e->ScanValues(0, 100));
  EXPECT_TRUE(p.keys.empty()) << "its name is not stored";
  ASSERT_OK_AND_ASSIGN(bool changed,
                       e->SetValueExpiry("old", e->clock()->UnixMillis() + 60000));
  EXPECT_TRUE(changed);
  EXPECT_EQ(e->GetValue("old").value().view(), "old bytes");
  EXPECT_EQ(e->CountValues().value(), 1u) << "the old entry is replaced, not kept";
  ASSERT_OK_AND_ASSIGN(p, e->ScanValues(0, 100));
  EXPECT_EQ(p.keys, std::vector<std::string>{"old"});
  ASSERT_OK_AND_ASSIGN(bool deleted, e->DeleteValue("old"));
  EXPECT_TRUE(deleted);
  EXPECT_TRUE(e->GetValue("old").status().IsNotFound());
}

// Stores `name`'s older-scheme bytes ("old bytes"), then its value record
// ("new bytes", expiring at `expires_at_ms`) on `ssd`: what a crash after a
// write-through SET stored the record, before it removed the older bytes,
// leaves.
void StoreBothSchemes(SsdTier& ssd, std::string_view name, uint64_t expires_at_ms) {
  BlockMeta meta;
  meta.key = internal::LegacyValueKey(name);
  ASSERT_OK(ssd.Put(meta, SharedBytes::Copy("old bytes"), /*dirty=*/false));
  meta.key = internal::ValueKey(name);
  ASSERT_OK(ssd.Put(
      meta,
      internal::EncodeValueRecord(name, expires_at_ms, SharedBytes::Copy("new bytes")),
      /*dirty=*/false));
}

// Damages one byte of the value of every record StoreBothSchemes wrote in
// the segment files of the SSD tier at `path`; how many it damaged.
int DamageRecordValues(const std::filesystem::path& path) {
  return DamageEveryCopyOnDisk(path, "new bytes");
}

// A key whose older-scheme copy outlived its value record (a crash after a
// write-through SET stored the record, before it removed the v2 bytes; or
// that removal failing): the record shadows the old bytes, and they must
// never come back when the record expires, lazily or by the sweep. They used
// to: the removal by expiry took the record only, and the next GET served
// the old bytes. A write of the key (EXPIRE) drops them, as it does when no
// record shadows them.
TEST_F(EngineTest, AnExpiredRecordNeverUncoversTheOlderSchemesBytes) {
  FakeClock& clock = clock_;
  const EngineOptions o = OnDiskOnFakeClock();
  const uint64_t t0 = clock.UnixMillis();
  auto e = Open(o);
  ASSERT_NE(e, nullptr);
  // Left in this run (as a failed removal leaves them): an open drops the
  // older copy a sound record shadows.
  for (const char* name : {"lazy", "swept", "expire"}) {
    const uint64_t expiry = std::string_view(name) == "expire" ? 0 : t0 + 1000;
    ASSERT_NO_FATAL_FAILURE(StoreBothSchemes(*EngineSsdTier(*e), name, expiry));
  }
  EXPECT_EQ(e->GetValue("lazy").value().view(), "new bytes");
  ASSERT_OK_AND_ASSIGN(bool changed, e->SetValueExpiry("expire", t0 + 1000));
  EXPECT_TRUE(changed);
  EXPECT_EQ(e->GetValue("expire").value().view(), "new bytes");
  EXPECT_EQ(e->CountValues().value(), 5u) << "2 keys in both forms, 1 in one";
  clock.AdvanceMillis(1000);
  ASSERT_OK_AND_ASSIGN(uint64_t removed, e->RemoveExpiredValues(1));
  EXPECT_EQ(removed, 1u);  // the earliest due: one of the three
  for (int read = 0; read < 2; ++read) {
    for (const char* name : {"lazy", "swept", "expire"}) {
      SCOPED_TRACE(std::string(name) + " read " + std::to_string(read));
      StatusOr<SharedBytes> v = e->GetValue(name);
      EXPECT_TRUE(v.status().IsNotFound()) << (v.ok() ? v->view() : "");
    }
  }
  ASSERT_OK(e->RemoveExpiredValues(100).status());
  EXPECT_EQ(e->CountValues().value(), 0u);
}

// The same when the record is lost to damage: the SSD tier drops a record
// whose bytes fail their checksum and answers NotFound ("corrupt: ..."), and
// a GET (or EXISTS, TTL) taking that for an absent record fell back to the
// older scheme's key: it served the old bytes, and so did every read after
// (the record gone). The older bytes leave with the damaged record.
TEST_F(EngineTest, ADamagedRecordNeverUncoversTheOlderSchemesBytes) {
  {
    SsdTierOptions so;
    so.path = dir_.str();
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<SsdTier> ssd, SsdTier::Open(so));
    for (const char* name : {"read", "probed"}) {
      ASSERT_NO_FATAL_FAILURE(StoreBothSchemes(*ssd, name, 0));
    }
    ASSERT_OK(ssd->Close());
  }
  ASSERT_EQ(DamageRecordValues(dir_.path()), 2);
  auto e = Open(OnDisk());
  ASSERT_NE(e, nullptr);
  StatusOr<int64_t> ttl = e->ValueTtlMillis("probed");
  EXPECT_TRUE(!ttl.ok() || *ttl == -2) << "TTL " << *ttl;
  for (int read = 0; read < 2; ++read) {
    for (const char* name : {"read", "probed"}) {
      SCOPED_TRACE(std::string(name) + " read " + std::to_string(read));
      StatusOr<SharedBytes> v = e->GetValue(name);
      EXPECT_TRUE(v.status().IsNotFound()) << (v.ok() ? v->view() : "");
      EXPECT_FALSE(e->ContainsValue(name));
    }
  }
  EXPECT_EQ(e->CountValues().value(), 0u);
}

// The same through a quiet read: an EXPIRE of a key whose expiry the
// catalog knows reads the record only for its bytes (TierStack::PeekPayload),
// which answered a record found damaged with a generic miss: the EXPIRE
// took the older scheme's bytes for the value, stored them in a new record
// and answered 1, and GET served them.
TEST_F(EngineTest, AnExpireOfADamagedRecordNeverStoresTheOlderSchemesBytes) {
  {
    SsdTierOptions so;
    so.path = dir_.str();
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<SsdTier> ssd, SsdTier::Open(so));
    ASSERT_NO_FATAL_FAILURE(StoreBothSchemes(*ssd, "k", 0));
    ASSERT_OK(ssd->Close());
  }
  auto e = Open(OnDisk());
  ASSERT_NE(e, nullptr);
  ASSERT_OK(e->RemoveExpiredValues(1).status());  // the catalog reads the record
  ASSERT_EQ(DamageRecordValues(dir_.path()), 1);
  StatusOr<bool> expired = e->SetValueExpiry("k", e->clock()->UnixMillis() + 60000);
  EXPECT_FALSE(expired.ok() && *expired) << "a damaged record's key given an expiry";
  StatusOr<SharedBytes> v = e->GetValue("k");
  EXPECT_TRUE(v.status().IsNotFound()) << (v.ok() ? v->view() : "");
}

// Leaves in the SSD tier at `dir` what a crash after a write-through SET of
// "k" stored its record, before it removed the older bytes, leaves; then
// reads the older bytes, so they are used later than the record (as after a
// rebuild of the metadata from the segments, which orders them anew).
void StoreBothSchemesTheOlderReadLast(const std::string& dir) {
  SsdTierOptions so;
  so.path = dir;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SsdTier> ssd, SsdTier::Open(so));
  ASSERT_NO_FATAL_FAILURE(StoreBothSchemes(*ssd, "k", 0));
  ASSERT_OK(ssd->Get(internal::LegacyValueKey("k")).status());
  ASSERT_OK(ssd->Close());
}

// A record that leaves the SSD tier before any read of its key, here evicted
// for capacity (the least recently used), uncovered the older bytes beside
// it: GET "k" served "old bytes", a value the key was overwritten with.
// The open now drops every older-scheme copy a record shadows.
TEST_F(EngineTest, ARecordEvictedBeforeAnyReadNeverUncoversTheOlderSchemesBytes) {
  ASSERT_NO_FATAL_FAILURE(StoreBothSchemesTheOlderReadLast(dir_.str()));
  EngineOptions o = OnDisk();
  o.ssd_capacity_bytes = 1000;
  auto e = Open(o);
  ASSERT_NE(e, nullptr);
  // 990 bytes of record: over the capacity by about k's record.
  ASSERT_OK(e->PutValue("filler", SharedBytes::Copy(std::string(960, 'f'))));
  ASSERT_OK(e->Flush());
  ASSERT_FALSE(EngineSsdTier(*e)->Contains(internal::ValueKey("k"))) << "not evicted";
  StatusOr<SharedBytes> v = e->GetValue("k");
  EXPECT_TRUE(v.status().IsNotFound()) << (v.ok() ? v->view() : "");
}

// The same for a record dropped as damaged by a read of other blocks (an
// audit here; a SCAN's or a compaction's reads alike) before any read of its
// own key: the read of the key then found no record, not a damaged one.
TEST_F(EngineTest, ARecordDroppedByAnotherReadNeverUncoversTheOlderSchemesBytes) {
  ASSERT_NO_FATAL_FAILURE(StoreBothSchemesTheOlderReadLast(dir_.str()));
  auto e = Open(OnDisk());
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(DamageRecordValues(dir_.path()), 1);
  std::vector<AuditFinding> findings;
  ASSERT_OK(EngineSsdTier(*e)->Audit(&findings));
  ASSERT_FALSE(EngineSsdTier(*e)->Contains(internal::ValueKey("k"))) << "not dropped";
  StatusOr<SharedBytes> v = e->GetValue("k");
  EXPECT_TRUE(v.status().IsNotFound()) << (v.ok() ? v->view() : "");
}

// The open's sweep of older-scheme copies is made once: it read every value
// on SSD, at every open (minutes for a tier of many gigabytes of values),
// though nothing writes that scheme any more. A sweep that left a copy it
// could not decide on (a damaged record: its name unknown) is made again.
bool LegacyValuesSwept(const std::string& dir) {
  SsdTierOptions so;
  so.path = dir;
  so.read_only = true;
  StatusOr<std::unique_ptr<SsdTier>> ssd = SsdTier::Open(so);
  if (!ssd.ok()) return false;
  StatusOr<bool> swept = (*ssd)->HasFlag("legacy-values-swept");
  return swept.ok() && *swept;
}

TEST_F(EngineTest, TheSweepOfOlderSchemeValuesIsMadeOnceAndAgainAfterADamagedRecord) {
  ASSERT_NO_FATAL_FAILURE(StoreBothSchemesTheOlderReadLast(dir_.str()));
  ASSERT_EQ(DamageRecordValues(dir_.path()), 1);
  ASSERT_NE(Open(OnDisk()), nullptr);
  EXPECT_FALSE(LegacyValuesSwept(dir_.str())) << "a damaged record's copy left behind";
  {
    SsdTierOptions so;
    so.path = dir_.str();
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<SsdTier> ssd, SsdTier::Open(so));
    ASSERT_OK(ssd->Remove(internal::ValueKey("k")));
    ASSERT_OK(ssd->Remove(internal::LegacyValueKey("k")));
    ASSERT_NO_FATAL_FAILURE(StoreBothSchemes(*ssd, "k2", 0));
    ASSERT_OK(ssd->Close());
  }
  ASSERT_NE(Open(OnDisk()), nullptr);
  EXPECT_TRUE(LegacyValuesSwept(dir_.str()));
  {
    // Copies only an older version could write, planted after the sweep:
    // the next open reads no value, so they stay.
    SsdTierOptions so;
    so.path = dir_.str();
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<SsdTier> ssd, SsdTier::Open(so));
    EXPECT_FALSE(ssd->Contains(internal::LegacyValueKey("k2"))) << "not swept";
    ASSERT_NO_FATAL_FAILURE(StoreBothSchemes(*ssd, "k3", 0));
    ASSERT_OK(ssd->Close());
  }
  ASSERT_NE(Open(OnDisk()), nullptr);
  SsdTierOptions so;
  so.path = dir_.str();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SsdTier> ssd, SsdTier::Open(so));
  EXPECT_TRUE(ssd->Contains(internal::LegacyValueKey("k3"))) << "every value read again";
}

// GET and a plain SET looked for older-scheme bytes under every name (an
// uncounted lookup in RAM and on SSD, a third of a hot GET hit) though nothing
// writes that scheme any more. They look only in a run whose open found a
// value on SSD that its sweep did not read as a sound record: here the
// second open swept "new" alone, so bytes planted after it (which only a
// test can do) are never read. An older binary writing between two opens
// leaves values the next open finds (the sweep is not made again): those
// still read, counted as one GET, and a SET replaces them.
TEST_F(EngineTest, OlderSchemeValuesWrittenBetweenTwoOpensStillRead) {
  {
    auto e = Open(OnDisk());
    ASSERT_NE(e, nullptr);
    ASSERT_OK(e->PutValue("new", SharedBytes::Copy("new bytes")));
    ASSERT_OK(e->Close());
  }
  BlockMeta legacy;
  {
    auto e = Open(OnDisk());  // sweeps "new": a sound record, nothing older
    ASSERT_NE(e, nullptr);
    legacy.key = internal::LegacyValueKey("planted");
    ASSERT_OK(EngineSsdTier(*e)->Put(legacy, SharedBytes::Copy("old bytes"), false));
    StatusOr<SharedBytes> v = e->GetValue("planted");
    EXPECT_TRUE(v.status().IsNotFound())
        << "looked for older bytes: " << (v.ok() ? v->view() : "");
    EXPECT_EQ(e->GetValue("new").value().view(), "new bytes");
    ASSERT_OK(e->Close());
  }
  {
    SsdTierOptions so;  // an older binary between the two opens
    so.path = dir_.str();
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<SsdTier> ssd, SsdTier::Open(so));
    legacy.key = internal::LegacyValueKey("old");
    ASSERT_OK(ssd->Put(legacy, SharedBytes::Copy("old bytes"), /*dirty=*/false));
    ASSERT_OK(ssd->Close());
  }
  ASSERT_TRUE(LegacyValuesSwept(dir_.str())) << "the third open must not sweep";
  auto e = Open(OnDisk());
  ASSERT_NE(e, nullptr);
  ASSERT_OK(e->ValueTtlMillis("").status());  // registers the values' owner
  for (const char* name : {"old", "planted"}) {
    SCOPED_TRACE(name);
    const EngineStats before = e->Stats();
    StatusOr<SharedBytes> v = e->GetValue(name);
    ASSERT_OK(v.status());
    EXPECT_EQ(v->view(), "old bytes");
    ExpectAGetCountedOnce(before, e->Stats(), /*present=*/true);
  }
  ASSERT_OK(e->PutValue("old", SharedBytes::Copy("newer bytes")));
  EXPECT_FALSE(EngineSsdTier(*e)->Contains(internal::LegacyValueKey("old")))
      << "the SET left the older bytes";
  EXPECT_EQ(e->GetValue("old").value().view(), "newer bytes");
  EXPECT_EQ(e->CountValues().value(), 3u) << "new, old's record, planted";
}

TEST_F(EngineTest, FlushMakesEveryStoredBlockDurableOnSsd) {
  auto e = Open(OnDisk());
  ASSERT_NE(e, nullptr);
  ASSERT_OK_AND_ASSIGN(Namespace ns, e->RegisterModel(KvSpec()));
  StoreAll(*e, ns, Tokens(4 * kBlockTokens));
  EXPECT_EQ(e->Stats().ssd.entries, 0u);
  ASSERT_OK(e->Flush());
  const EngineStats s = e->Stats();
  EXPECT_EQ(s.dirty_blocks, 0u);
  EXPECT_EQ(s.ssd_queued_blocks, 0u);
  EXPECT_EQ(s.ssd.entries, 4u);
}

// README.md's "The C++ API in short", line for line but for the directory and
// the model size.
TEST_F(EngineTest, TheReadmeExampleRuns) {
  std::vector<int32_t> prompt_tokens = Tokens(8 * kBlockTokens);
  std::vector<int32_t> all_tokens = Tokens(9 * kBlockTokens);
  std::vector<LayerState> layer_caches = KvLayers(2, 9 * kBlockTokens, rng_);
  {
    auto engine =
        Engine::Open({.data_dir = dir_.str(), .hot_capacity_bytes = 8ull << 30}).value();
    NamespaceSpec spec{.model = "llama-3-8b",
                       .block_tokens = kBlockTokens,
                       .dtype = DType::kFloat32,
                       .layer_types = std::vector<std::string>(2, "KVCache")};
    Namespace ns = engine->RegisterModel(spec).value();

    MatchResult match = engine->Match(ns, prompt_tokens).value();
    RestoreResult restored = engine->Restore(match).value();
    EXPECT_EQ(restored.restored_tokens, 0u) << "nothing cached yet";
    StoreResult stored = engine->Store(ns, all_tokens, layer_caches).value();
    EXPECT_EQ(stored.blocks_written, 9u);
    ASSERT_OK(engine->Close());
  }
  auto engine = Open(OnDisk());
  ASSERT_NE(engine, nullptr);
  NamespaceSpec spec = KvSpec("llama-3-8b");
  ASSERT_OK_AND_ASSIGN(Namespace ns, engine->RegisterModel(spec));
  EXPECT_EQ(MatchAndRestore(*engine, ns, prompt_tokens).restored_tokens,
            prompt_tokens.size());
}

// docs/format.md section 4's example, and what a decoder refuses.
TEST(ValueRecord, EncodesAsTheFormatPageShowsAndChecksItsKey) {
  const SharedBytes r = internal::EncodeValueRecord("k", 0, SharedBytes::Copy("v"));
  std::string hex;
  for (uint8_t b : r.view()) {
    hex += "0123456789abcdef"[b >> 4];
    hex += "0123456789abcdef"[b & 15];
  }
  EXPECT_EQ(hex,
            "504b5656"
            "0100"
            "0000"
            "01000000"
            "00000000"
            "0000000000000000"
            "6b76");
  ASSERT_OK_AND_ASSIGN(internal::ValueRecord d,
                       internal::DecodeValueRecord(r, internal::ValueKey("k")));
  EXPECT_EQ(d.name, "k");
  EXPECT_EQ(d.value.view(), "v");
  EXPECT_TRUE(
      internal::DecodeValueRecord(r, internal::ValueKey("j")).status().IsCorruption());
  std::string bad(r.view());
  bad[8] = 9;  // a name running past the end
  EXPECT_TRUE(internal::DecodeValueRecord(SharedBytes::Copy(bad), internal::ValueKey("k"))
                  .status()
                  .IsCorruption());
  EXPECT_TRUE(
      internal::DecodeValueRecord(SharedBytes::Copy("PKV"), internal::ValueKey("k"))
          .status()
          .IsCorruption());
}

// The catalog's hand visits every entry in turn and wraps round; From pages
// in key order and never splits keys sharing their high half.
TEST(ValueCatalog, TheHandGoesRoundAndPagesKeepHighHalvesTogether) {
  internal::ValueCatalog c;
  for (uint64_t i = 1; i <= 5; ++i) c.Note(BlockKey{i, 0}, "k" + std::to_string(i), 0);
  c.Note(BlockKey{3, 7}, "k3b", 0);  // shares its high half with k3
  std::vector<uint64_t> seen;
  for (int round = 0; round < 4; ++round) {
    for (const BlockKey& k : c.NextAfterHand(4)) seen.push_back(k.hi);
  }
  EXPECT_EQ(seen.size(), 16u);
  // 16 visits of 6 entries in key order: the first four thrice, the rest twice.
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1u), 3);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 3u), 6);  // k3 and k3b
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 5u), 2);
  internal::ValueCatalog::Page p = c.From(0, 3);
  ASSERT_EQ(p.entries.size(), 4u);  // k1 k2 k3 k3b: k3b is not left for the next page
  EXPECT_EQ(p.entries[3].name, "k3b");
  EXPECT_EQ(p.next_cursor, 4u);
  p = c.From(p.next_cursor, 3);
  EXPECT_EQ(p.entries.size(), 2u);
  EXPECT_EQ(p.next_cursor, 0u);
  c.Forget(BlockKey{3, 7});
  EXPECT_FALSE(c.Knows(BlockKey{3, 7}));
  EXPECT_EQ(c.NextAfterHand(100).size(), 5u);
}

// EngineOptions::file_system carries every SSD file operation: a write fault
// injected there fails the engine's SSD writes, and nothing else is touched.
TEST(EngineFileSystem, TheSsdTierWritesThroughTheEnginesFileSystem) {
  testing::TempDir dir;
  FaultInjectionFileSystem fs;
  EngineOptions o = Quiet({});
  o.data_dir = dir.str();
  o.hot_capacity_bytes = 0;  // every block straight to SSD
  o.file_system = &fs;
  StatusOr<std::unique_ptr<Engine>> e = Engine::Open(o);
  ASSERT_OK(e);
  const Namespace ns = (*e)->RegisterModel(KvSpec()).value();
  std::mt19937_64 rng(testing::TestSeed("EngineFileSystem"));
  const std::vector<int32_t> tokens = Tokens(2 * kBlockTokens);
  ASSERT_OK((*e)->Store(ns, tokens, KvLayers(2, 2 * kBlockTokens, rng)).status());
  fs.AddFault({.op = FaultOp::kWrite, .path_contains = ".seg"});
  EXPECT_FALSE(
      (*e)->Store(ns, Tokens(kBlockTokens, 500), KvLayers(2, kBlockTokens, rng)).ok());
  EXPECT_GT(fs.faults_injected(), 0u);
  fs.ClearFaults();
  EXPECT_EQ((*e)->Match(ns, tokens).value().tokens.size(), tokens.size());
  ASSERT_OK((*e)->Close());
}

// A SET whose new value is too large for the hot tier goes to SSD only. When
// that SSD write fails the SET fails, and the key keeps its old value: in RAM
// only (never written below) or on SSD (flushed), in write-back and
// write-through mode, and after the fault is gone and the engine reopened.
// (The old copy was dropped from both tiers before the new one was written:
// the failed SET left the key absent.)
TEST(EngineFileSystem, AFailedSetOfAValueTooLargeForRamKeepsTheOldValue) {
  for (const bool write_through : {false, true}) {
    for (const bool flushed : {false, true}) {
      SCOPED_TRACE(std::string(write_through ? "write-through" : "write-back") +
                   (flushed ? ", old value on SSD" : ", old value in RAM"));
      testing::TempDir dir;
      FaultInjectionFileSystem fs;
      EngineOptions o = Quiet({});
      o.data_dir = dir.str();
      o.hot_capacity_bytes = 1 << 20;
      o.write_through = write_through;
      o.file_system = &fs;
      StatusOr<std::unique_ptr<Engine>> e = Engine::Open(o);
      ASSERT_OK(e);
      ASSERT_OK((*e)->PutValue("k", SharedBytes::Copy(std::string_view("old"))));
      if (flushed) {
        ASSERT_OK((*e)->Flush());
      }
      fs.AddFault({.op = FaultOp::kWrite, .path_contains = ".seg"});
      const std::string big(2 << 20, 'n');  // twice the hot tier
      EXPECT_FALSE((*e)->PutValue("k", SharedBytes::Copy(big)).ok());
      EXPECT_GT(fs.faults_injected(), 0u);
      fs.ClearFaults();
      StatusOr<SharedBytes> v = (*e)->GetValue("k");
      ASSERT_OK(v);
      EXPECT_EQ(v->view(), "old");
      EXPECT_EQ((*e)->CountValues().value(), 1u);
      ASSERT_OK((*e)->Close());
      e = Engine::Open(o);
      ASSERT_OK(e);
      v = (*e)->GetValue("k");
      ASSERT_OK(v);
      EXPECT_EQ(v->view(), "old");
      ASSERT_OK((*e)->Close());
    }
  }
}

// Options of an engine in `dir` over `fs` whose value "k" stays in RAM
// (write-back), and that engine with "k" put; then the disk is full for
// `count` segment writes (injected ENOSPC).
EngineOptions OpenWithAValueInRamThenFillTheDisk(const testing::TempDir& dir,
                                                 FaultInjectionFileSystem& fs,
                                                 uint64_t count,
                                                 std::unique_ptr<Engine>* engine) {
  EngineOptions o = Quiet({});
  o.data_dir = dir.str();
  o.hot_capacity_bytes = 1 << 20;  // write-back: the value stays in RAM
  o.file_system = &fs;
  StatusOr<std::unique_ptr<Engine>> e = Engine::Open(o);
  EXPECT_OK(e);
  if (!e.ok()) return o;
  EXPECT_OK((*e)->PutValue("k", SharedBytes::Copy(std::string_view("acknowledged"))));
  fs.AddFault({.op = FaultOp::kWrite,
               .path_contains = ".seg",
               .count = count,
               .error = Status::NoSpace("injected ENOSPC")});
  *engine = std::move(*e);
  return o;
}

// The engine of `o` reopened: "k", which RAM held at the stop, was written
// and the stop was a clean one.
void ExpectTheValueRamHeldAfterACleanStop(const EngineOptions& o) {
  StatusOr<std::unique_ptr<Engine>> e = Engine::Open(o);
  ASSERT_OK(e);
  StatusOr<SharedBytes> v = (*e)->GetValue("k");
  ASSERT_OK(v) << "the value RAM held was lost at the shutdown";
  EXPECT_EQ(v->view(), "acknowledged");
  EXPECT_TRUE(EngineSsdTier(**e)->open_report().previous_shutdown_clean);
  ASSERT_OK((*e)->Close());
}

// A Close whose write-back of RAM failed (ENOSPC) lost the values only RAM
// held, so the next open says the last stop was not clean (its log line,
// `prefixkv audit`). (The SSD tier, closing fine itself, marked the stop
// clean, and the restart logged 'clean' with the values gone.)
TEST(EngineFileSystem, AShutdownThatCouldNotWriteRamBackIsNotMarkedClean) {
  testing::TempDir dir;
  FaultInjectionFileSystem fs;
  std::unique_ptr<Engine> engine;
  const EngineOptions o =
      OpenWithAValueInRamThenFillTheDisk(dir, fs, UINT64_MAX, &engine);
  ASSERT_NE(engine, nullptr);
  EXPECT_FALSE(engine->Close().ok());
  EXPECT_GT(fs.faults_injected(), 0u);
  fs.ClearFaults();
  StatusOr<std::unique_ptr<Engine>> e = Engine::Open(o);
  ASSERT_OK(e);
  EXPECT_FALSE((*e)->GetValue("k").ok()) << "the value RAM held was written after all";
  EXPECT_FALSE(EngineSsdTier(**e)->open_report().previous_shutdown_clean)
      << "a stop that lost acknowledged values was marked clean";
  ASSERT_OK((*e)->Close());
}

// The disk was full for one write during the run (a Flush), then had room
// again (another program's file deleted): the SSD tier refused payload
// writes as on a full disk until its retry interval passed, which a stop
// does not wait for, so the shutdown's write-back of the value RAM still held
// was refused without a try and the value lost with room for it. A stop now
// takes the reserve back at once and writes it.
TEST(EngineFileSystem, AShutdownAfterSpaceCameBackWritesRamBack) {
  testing::TempDir dir;
  FaultInjectionFileSystem fs;
  std::unique_ptr<Engine> engine;
  const EngineOptions o = OpenWithAValueInRamThenFillTheDisk(dir, fs, 1, &engine);
  ASSERT_NE(engine, nullptr);
  EXPECT_TRUE(engine->Flush().IsNoSpace());  // the disk is full; the value stays in RAM
  EXPECT_EQ(fs.faults_injected(), 1u);
  EXPECT_OK(engine->Close());
  ExpectTheValueRamHeldAfterACleanStop(o);
}

// The disk was full for the shutdown's one write of the value RAM held (a
// moment: another program's file deleted just after), then had room: that
// write failed and nothing tried it again, so the value was lost with room
// for it. A shutdown now tries once more what its write-back could not write.
TEST(EngineFileSystem, AShutdownRetriesTheWriteBackOfRamAfterAMomentaryFullDisk) {
  testing::TempDir dir;
  FaultInjectionFileSystem fs;
  std::unique_ptr<Engine> engine;
  const EngineOptions o = OpenWithAValueInRamThenFillTheDisk(dir, fs, 1, &engine);
  ASSERT_NE(engine, nullptr);
  EXPECT_OK(engine->Close());
  EXPECT_EQ(fs.faults_injected(), 1u);
  ExpectTheValueRamHeldAfterACleanStop(o);
}

// ---- KV events ----------------------------------------------------------------------

// A consumer of KV events: applies them, strictly, to a set of (tier, key)
// pairs. A removal of a pair it does not hold, or a move into a tier that
// already holds the block, is an ordering error.
class KvEventMirror {
 public:
  void Apply(const KvEvent& e) {
    std::lock_guard<std::mutex> lock(mu_);
    ++events_;
    by_reason_[e.kind == KvEventKind::kRemoved ? e.reason : KvRemoveReason::kNone] += 1;
    const auto at = std::pair(e.tier, e.key);
    switch (e.kind) {
      case KvEventKind::kStored:
        held_.insert(at);
        break;
      case KvEventKind::kRemoved:
        if (held_.erase(at) == 0) errors_.push_back("removed absent " + Name(e));
        break;
      case KvEventKind::kMoved:
        if (held_.contains(std::pair(e.from, e.key)))
          errors_.push_back("moved held " + Name(e));
        if (!held_.insert(at).second) errors_.push_back("moved into held " + Name(e));
        break;
      case KvEventKind::kCleared:
        std::erase_if(held_, [&](const auto& p) { return p.first == e.tier; });
        break;
    }
  }
  std::set<BlockKey> Keys(TierLevel tier) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::set<BlockKey> out;
    for (const auto& [t, k] : held_) {
      if (t == tier) out.insert(k);
    }
    return out;
  }
  std::vector<std::string> errors() const {
    std::lock_guard<std::mutex> lock(mu_);
    return errors_;
  }
  uint64_t count(KvRemoveReason r) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_reason_.find(r);
    return it == by_reason_.end() ? 0 : it->second;
  }
  uint64_t events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

 private:
  static std::string Name(const KvEvent& e) {
    return std::string(TierLevelName(e.tier)) + " " + e.key.ToHex();
  }
  mutable std::mutex mu_;
  std::set<std::pair<TierLevel, BlockKey>> held_;
  std::map<KvRemoveReason, uint64_t> by_reason_;
  std::vector<std::string> errors_;
  uint64_t events_ = 0;
};

class EngineKvEventsTest : public testing::EngineFixture {
 protected:
  EngineKvEventsTest() : EngineFixture("EngineKvEventsTest") {}

  // The mirror holds exactly what the tiers hold: every SSD block by key, and
  // as many hot blocks as the budget, each of which it holds.
  void ExpectMirrorIsExact(Engine& e, const std::vector<Namespace>& models) {
    ASSERT_OK(e.Flush());  // the write-back queue drained: nothing in flight
    std::set<BlockKey> ssd;
    EngineSsdTier(e)->ForEach([&](const BlockMeta& m, uint64_t) { ssd.insert(m.key); });
    EXPECT_EQ(mirror_.Keys(TierLevel::kSsd), ssd);
    std::set<BlockKey> hot;
    for (Namespace ns : models) {
      EngineHotTier(e, ns)->ForEach(
          [&](const BlockMeta& m, uint64_t) { hot.insert(m.key); });
    }
    const std::set<BlockKey> mirrored_hot = mirror_.Keys(TierLevel::kHot);
    // The key-value space's hot blocks are not enumerable from here: every
    // model block must match, and the total must.
    for (const BlockKey& k : hot) EXPECT_TRUE(mirrored_hot.contains(k)) << k.ToHex();
    EXPECT_EQ(mirrored_hot.size(), EngineHotBudget(e)->Totals().entries);
    EXPECT_EQ(mirror_.errors(), std::vector<std::string>{});
  }

  KvEventMirror mirror_;
};

// Random stores, restores (promotions), value puts, deletes and expiries on
// small tiers (hot evictions with write-back, SSD evictions): after every
// round, the events applied in order reproduce the tiers' contents exactly.
TEST_F(EngineKvEventsTest, EventsAppliedInOrderReproduceEveryTiersContents) {
  EngineOptions o = OnDiskOnFakeClock();
  o.hot_capacity_bytes = 48 << 10;
  o.ssd_capacity_bytes = 64 << 10;
  o.on_kv_event = [&](const KvEvent& ev) { mirror_.Apply(ev); };
  std::unique_ptr<Engine> e = Open(o);
  ASSERT_NE(e, nullptr);
  std::vector<Namespace> models = {e->RegisterModel(KvSpec("a")).value(),
                                   e->RegisterModel(KvSpec("b")).value()};
  std::uniform_int_distribution<int> pick(0, 99);
  for (int round = 0; round < 12; ++round) {
    for (int op = 0; op < 25; ++op) {
      const Namespace ns = models[pick(rng_) % 2];
      const int what = pick(rng_);
      // Chains share their first blocks: prefixes 0..3, lengths 1..12 blocks.
      const int32_t prefix = pick(rng_) % 4 * 1000;
      const size_t blocks = 1 + pick(rng_) % 12;
      const std::vector<int32_t> tokens = Tokens(blocks * kBlockTokens, prefix);
      const std::string key = "v" + std::to_string(pick(rng_) % 10);
      if (what < 45) {
        StoreAll(*e, ns, tokens);
      } else if (what < 70) {
        (void)MatchAndRestore(*e, ns, tokens);
      } else if (what < 82) {
        ASSERT_OK(e->PutValue(key, SharedBytes::Copy(std::string(700, 'x'))));
      } else if (what < 90) {
        ASSERT_OK(e->DeleteValue(key).status());
      } else {
        SetValueOptions so;
        so.expires_at_unix_ms = clock_.UnixMillis() + 5;
        ASSERT_OK(
            e->SetValue(key, SharedBytes::Copy(std::string_view("short")), so).status());
        clock_.AdvanceMillis(10);
        EXPECT_TRUE(e->GetValue(key).status().IsNotFound());
      }
    }
    ExpectMirrorIsExact(*e, models);
  }
  // The workload reached every kind of change.
  EXPECT_GT(mirror_.count(KvRemoveReason::kEvicted), 0u);
  EXPECT_GT(mirror_.count(KvRemoveReason::kRemoved), 0u);
  EXPECT_GT(mirror_.count(KvRemoveReason::kExpired), 0u);
  EXPECT_GT(e->Stats().ssd.evictions, 0u);
  ASSERT_OK(e->Close());
}

// Threads storing, restoring, putting and deleting the same keys at once:
// each key's events still arrive in the order of its changes (the mirror
// never removes what it does not hold) and reproduce the tiers at the end.
TEST_F(EngineKvEventsTest, ConcurrentWritersOfTheSameKeysKeepEachKeysEventsInOrder) {
  EngineOptions o = OnDisk(/*hot_bytes=*/32 << 10);
  o.ssd_capacity_bytes = 96 << 10;
  o.on_kv_event = [&](const KvEvent& ev) { mirror_.Apply(ev); };
  std::unique_ptr<Engine> e = Open(o);
  ASSERT_NE(e, nullptr);
  const std::vector<Namespace> models = {e->RegisterModel(KvSpec()).value()};
  const uint64_t seed = rng_();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + t);
      for (int op = 0; op < 150; ++op) {
        const std::vector<int32_t> tokens = Tokens(
            (1 + rng() % 6) * kBlockTokens, static_cast<int32_t>(rng() % 3) * 1000);
        const std::string key = "v" + std::to_string(rng() % 4);
        switch (rng() % 4) {
          case 0:
            (void)e->Store(models[0], tokens,
                           KvLayers(2, static_cast<int64_t>(tokens.size()), rng));
            break;
          case 1:
            if (StatusOr<MatchResult> m = e->Match(models[0], tokens); m.ok())
              (void)e->Restore(*m);
            break;
          case 2:
            (void)e->PutValue(key, SharedBytes::Copy(std::string(900, 'y')));
            break;
          default:
            (void)e->DeleteValue(key);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ExpectMirrorIsExact(*e, models);
  EXPECT_GT(mirror_.count(KvRemoveReason::kEvicted), 0u);
  ASSERT_OK(e->Close());
}

// A corrupt SSD block found by a read leaves with reason "corrupt".
TEST_F(EngineKvEventsTest, ACorruptSsdBlockLeavesWithReasonCorrupt) {
  std::vector<KvEvent> seen;
  std::mutex mu;
  EngineOptions o = OnDisk(/*hot_bytes=*/0);
  o.on_kv_event = [&](const KvEvent& ev) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(ev);
  };
  std::unique_ptr<Engine> e = Open(o);
  ASSERT_NE(e, nullptr);
  {
    // The open's: the hot tier is empty (every open says so, hot tier or not).
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].kind, KvEventKind::kCleared);
    EXPECT_EQ(seen[0].tier, TierLevel::kHot);
    seen.clear();
  }
  const Namespace ns = e->RegisterModel(KvSpec()).value();
  StoreAll(*e, ns, Tokens(2 * kBlockTokens));
  ASSERT_OK(e->Flush());
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(seen.size(), 2u);  // two blocks stored on SSD, nothing else
    for (const KvEvent& ev : seen) {
      EXPECT_EQ(ev.kind, KvEventKind::kStored);
      EXPECT_EQ(ev.tier, TierLevel::kSsd);
      EXPECT_GT(ev.bytes, 0u);
      EXPECT_GT(ev.unix_ms, 0);
    }
    EXPECT_EQ(seen[0].parent, seen[0].namespace_id);  // a chain's first block
    EXPECT_EQ(seen[1].parent, seen[0].key);
    seen.clear();
  }
  // Damage every payload extent on disk (a byte per 512), then read.
  for (const auto& seg : std::filesystem::recursive_directory_iterator(dir_.str())) {
    if (seg.path().extension() != ".seg") continue;
    std::fstream f(seg.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto size = static_cast<std::streamoff>(std::filesystem::file_size(seg.path()));
    for (std::streamoff at = 0; at < size; at += 512) {
      char c = 0;
      f.seekg(at);
      f.read(&c, 1);
      c = static_cast<char>(c ^ 0x5a);
      f.seekp(at);
      f.write(&c, 1);
    }
  }
  StatusOr<MatchResult> m = e->Match(ns, Tokens(2 * kBlockTokens));
  ASSERT_OK(m);
  (void)e->Restore(*m);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen[0].kind, KvEventKind::kRemoved);
  EXPECT_EQ(seen[0].reason, KvRemoveReason::kCorrupt);
  EXPECT_EQ(seen[0].tier, TierLevel::kSsd);
  EXPECT_FALSE(seen[0].copy_remains);
}

// A cached block of other shapes than the spec's (here rewritten with KV of
// one head) is sound bytes, not damaged ones: the restore that drops it and
// the matched block after it says "removed" in each tier that held them,
// never "corrupt", which an event consumer counts as damage, and no tier
// counts a corruption.
TEST_F(EngineKvEventsTest, ABlockOfOtherShapesLeavesWithReasonRemovedNotCorrupt) {
  std::vector<KvEvent> seen;
  std::mutex mu;
  EngineOptions o = OnDisk(/*hot_bytes=*/8 << 20);
  o.on_kv_event = [&](const KvEvent& ev) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(ev);
  };
  std::unique_ptr<Engine> e = Open(o);
  ASSERT_NE(e, nullptr);
  const Namespace ns = e->RegisterModel(ShapedKvSpec("m")).value();
  const std::vector<int32_t> prompt = Tokens(2 * kBlockTokens);
  StoreAll(*e, ns, prompt);
  ASSERT_OK(e->Flush());  // on SSD too
  ASSERT_OK_AND_ASSIGN(MatchResult match, e->Match(ns, prompt));
  ASSERT_EQ(match.keys.size(), 2u);
  TierStack* stack = EngineTiers(*e, ns);
  ASSERT_OK_AND_ASSIGN(BlockMeta meta, stack->Peek(match.keys[0]));
  ASSERT_OK_AND_ASSIGN(TierHit hit, stack->PeekPayload(match.keys[0]));
  ASSERT_OK_AND_ASSIGN(BlockRecord rec, DecodeBlock(hit.payload));
  for (LayerState& l : rec.layers) {
    for (Tensor& x : l.tensors) x = Tensor::Filled(DType::kFloat32, {1, 1, kBlockTokens, 8}, 1);
  }
  ASSERT_OK(stack->Rewrite(meta, EncodeBlock(rec).value()));
  ASSERT_OK(e->Flush());
  const TierCounters hot = e->Stats().hot, ssd = e->Stats().ssd;
  {
    std::lock_guard<std::mutex> lock(mu);
    seen.clear();
  }
  ASSERT_OK_AND_ASSIGN(RestoreResult r, e->Restore(match));
  EXPECT_EQ(r.restored_blocks, 0u) << r.reason;
  EXPECT_FALSE(stack->Contains(match.keys[0]));
  EXPECT_FALSE(stack->Contains(match.keys[1]));
  std::map<std::pair<BlockKey, TierLevel>, KvRemoveReason> removed;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const KvEvent& ev : seen) {
      if (ev.kind == KvEventKind::kRemoved) removed[{ev.key, ev.tier}] = ev.reason;
    }
  }
  for (const BlockKey& key : match.keys) {
    for (TierLevel tier : {TierLevel::kHot, TierLevel::kSsd}) {
      SCOPED_TRACE(key.ToHex() + (tier == TierLevel::kHot ? " hot" : " ssd"));
      ASSERT_TRUE(removed.contains({key, tier}));
      EXPECT_EQ(std::string(KvRemoveReasonName(removed[{key, tier}])), "removed");
    }
  }
  EXPECT_EQ(e->Stats().hot.corruptions, hot.corruptions);
  EXPECT_EQ(e->Stats().ssd.corruptions, ssd.corruptions);
  ASSERT_OK(e->Close());
}

// Write-through keeps every block in RAM and on SSD; when the small SSD tier
// evicts one the hot tier still holds, its removal says a copy remains.
TEST_F(EngineKvEventsTest, AnSsdEvictionOfABlockStillInRamSaysACopyRemains) {
  uint64_t kept = 0, lost = 0;
  std::mutex mu;
  EngineOptions o = OnDisk(/*hot_bytes=*/4 << 20);
  o.write_through = true;
  o.ssd_capacity_bytes = 24 << 10;
  o.on_kv_event = [&](const KvEvent& ev) {
    if (ev.kind != KvEventKind::kRemoved || ev.tier != TierLevel::kSsd) return;
    std::lock_guard<std::mutex> lock(mu);
    (ev.copy_remains ? kept : lost) += 1;
  };
  std::unique_ptr<Engine> e = Open(o);
  ASSERT_NE(e, nullptr);
  const Namespace ns = e->RegisterModel(KvSpec()).value();
  for (int32_t chain = 0; chain < 20; ++chain) {
    StoreAll(*e, ns, Tokens(4 * kBlockTokens, chain * 1000));
  }
  ASSERT_OK(e->Flush());
  EXPECT_EQ(e->Stats().hot.evictions, 0u);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_GT(kept, 0u);
  EXPECT_EQ(lost, 0u);
}

}  // namespace
}  // namespace prefixkv
