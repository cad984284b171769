// Helpers for testing any BlockTier: deterministic payloads and metadata, a
// recording eviction listener, and a check that counters match contents.
// tests/storage/tier_conformance.h builds on them; include this header alone
// when a test needs the helpers without instantiating the conformance suite.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "prefixkv/advanced/tier.h"
#include "tests/support/test_util.h"

namespace prefixkv::testing {

// A payload whose bytes are a function of (key, version), so any reader can
// tell a right payload from a wrong one.
inline SharedBytes ConformancePayload(const BlockKey& key, uint32_t version,
                                      size_t size) {
  std::string s(size, '\0');
  uint64_t x = key.lo * 31 + key.hi + version * 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < size; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    s[i] = static_cast<char>(x >> 56);
  }
  return SharedBytes::Adopt(std::move(s));
}

inline BlockMeta ConformanceMeta(uint64_t id, OwnerId owner = 0) {
  BlockMeta m;
  m.key = BlockKey{0xC0FFEE, id + 1};
  m.parent = id == 0 ? BlockKey{} : BlockKey{0xC0FFEE, id};
  m.namespace_id = BlockKey{0xC0FFEE, 0};
  m.owner = owner;
  return m;
}

// Records every OnEvict call. Thread-safe (a tier may evict from any thread).
class RecordingListener final : public EvictionListener {
 public:
  struct Call {
    BlockMeta meta;
    std::string payload;
    bool dirty;
  };
  void OnEvict(const BlockMeta& meta, const SharedBytes& payload, bool dirty) override {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back({meta, std::string(payload.view()), dirty});
  }
  std::vector<Call> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Call> calls_;
};

// Fails the current test unless Totals() and OwnerCounters() agree with what
// ForEach() reports and Audit() finds nothing.
inline void ExpectCountersMatchContents(BlockTier& tier,
                                        const std::vector<OwnerId>& owners) {
  std::map<OwnerId, std::pair<uint64_t, uint64_t>> seen;  // owner -> entries, bytes
  uint64_t entries = 0, bytes = 0;
  tier.ForEach([&](const BlockMeta& meta, uint64_t charged) {
    seen[meta.owner].first += 1;
    seen[meta.owner].second += charged;
    entries += 1;
    bytes += charged;
  });
  const TierCounters total = tier.Totals();
  EXPECT_EQ(total.entries, entries);
  EXPECT_EQ(total.bytes, bytes);
  for (OwnerId owner : owners) {
    const TierCounters c = tier.OwnerCounters(owner);
    EXPECT_EQ(c.entries, seen[owner].first) << "owner " << owner;
    EXPECT_EQ(c.bytes, seen[owner].second) << "owner " << owner;
  }
  std::vector<AuditFinding> findings;
  ASSERT_OK(tier.Audit(&findings));
  for (const AuditFinding& f : findings) ADD_FAILURE() << f.what << ": " << f.detail;
}

}  // namespace prefixkv::testing
