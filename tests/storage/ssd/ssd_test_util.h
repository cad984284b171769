// Helpers shared by the SSD tier tests: options for a test directory, chained
// block metadata and payloads whose bytes identify (key, version).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "prefixkv/advanced/ssd_tier.h"
#include "ssd_test_peer.h"
#include "tests/storage/tier_conformance.h"
#include "tests/support/test_util.h"

namespace prefixkv::testing {

// Collects log lines (thread-safe) so tests can check what was said, once.
struct LogLines {
  std::mutex mu;
  std::vector<std::string> lines;
  std::function<void(std::string_view)> Sink() {
    return [this](std::string_view l) {
      std::lock_guard<std::mutex> lock(mu);
      lines.emplace_back(l);
    };
  }
  int Count(std::string_view needle) {
    std::lock_guard<std::mutex> lock(mu);
    int n = 0;
    for (const std::string& l : lines) n += l.find(needle) != std::string::npos ? 1 : 0;
    return n;
  }
};

inline SsdTierOptions TestSsdOptions(const std::string& path) {
  SsdTierOptions o;
  o.path = path;
  o.write_buffer_bytes = 4 << 20;
  o.segment_bytes = 4 << 20;
  o.log = [](std::string_view) {};
  return o;
}

inline std::unique_ptr<SsdTier> OpenSsd(const SsdTierOptions& o) {
  StatusOr<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o);
  EXPECT_OK(tier);
  return tier.ok() ? std::move(tier).value() : nullptr;
}

// OpenSsd with SsdTierTestPeer's hook before every metadata commit.
inline std::unique_ptr<SsdTier> OpenSsdWithCommitHook(const SsdTierOptions& o,
                                                      std::function<Status()> hook) {
  StatusOr<std::unique_ptr<SsdTier>> tier =
      SsdTierTestPeer::OpenWithCommitHook(o, std::move(hook));
  EXPECT_OK(tier);
  return tier.ok() ? std::move(tier).value() : nullptr;
}

// Block `index` of chain `chain` in namespace `ns`: parent is index-1 (the
// namespace root for index 0).
inline BlockMeta ChainBlock(uint64_t chain, uint64_t index, uint64_t ns = 1,
                            OwnerId owner = 0) {
  BlockMeta m;
  m.namespace_id = BlockKey{ns, 0};
  m.key = BlockKey{ns << 32 | chain, index + 1};
  m.parent = index == 0 ? m.namespace_id : BlockKey{ns << 32 | chain, index};
  m.owner = owner;
  return m;
}

}  // namespace prefixkv::testing
