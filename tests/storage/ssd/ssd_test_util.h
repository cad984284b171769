// Helpers shared by the SSD tier tests: options for a test directory, chained
// block metadata and payloads whose bytes identify (key, version), the segment
// files on disk, byte damage, and one line of counters for a randomized run.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "prefixkv/advanced/ssd_tier.h"
#include "ssd_test_peer.h"
#include "tests/storage/tier_conformance.h"
#include "tests/support/test_util.h"

namespace prefixkv::testing {

// The typed conformance suite comes with the shared helpers above;
// ssd_tier_conformance_test runs it, the tests including this header do not.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TierConformance);

inline SsdTierOptions TestSsdOptions(const std::string& path) {
  SsdTierOptions o;
  o.path = path;
  o.write_buffer_bytes = 4 << 20;
  o.segment_bytes = 4 << 20;
  o.reserve_bytes = 1 << 20;  // a smaller full-disk reserve: less to write per open
  o.log = [](std::string_view) {};
  return o;
}

inline std::unique_ptr<SsdTier> OpenSsd(const SsdTierOptions& o) {
  StatusOr<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o);
  EXPECT_OK(tier);
  return tier.ok() ? std::move(tier).value() : nullptr;
}

// Deletes every metadata file of the tier directory `path` (all but
// segments/), as RepairCli.AllMetadataGoneIsRebuiltFromTheSegments does.
inline void DropMetadata(const std::filesystem::path& path) {
  for (const auto& e : std::filesystem::directory_iterator(path)) {
    if (e.path().filename() != "segments") std::filesystem::remove_all(e.path());
  }
}

// DropMetadata, then OpenSsd: the tier rebuilt from its segments (checked).
inline std::unique_ptr<SsdTier> OpenRebuilt(const SsdTierOptions& o) {
  DropMetadata(o.path);
  std::unique_ptr<SsdTier> tier = OpenSsd(o);
  if (tier != nullptr) {
    EXPECT_NE(tier->open_report().metadata_damage, "") << "rebuilt";
  }
  return tier;
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

// Audit finds nothing wrong with `tier`.
inline void ExpectAuditClean(SsdTier& tier) {
  std::vector<AuditFinding> findings;
  ASSERT_OK(tier.Audit(&findings));
  for (const AuditFinding& f : findings) ADD_FAILURE() << f.what << ": " << f.detail;
}

// The tier's payload segment files under `dir` (a tier's path), sorted.
inline std::vector<std::filesystem::path> SegmentFiles(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir / "segments")) {
    if (e.path().extension() == ".seg") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Damages one byte of `file` in place: XORs the byte at `offset` with `mask`
// (nonzero, so the byte changes).
inline void XorByteAt(const std::filesystem::path& file, uint64_t offset, char mask) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  char c;
  f.seekg(static_cast<std::streamoff>(offset));
  f.read(&c, 1);
  c ^= mask;
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// Prints one line "<label> name=value name=value ..." of a run's counters.
inline void PrintCounters(
    const std::string& label,
    std::initializer_list<std::pair<const char*, uint64_t>> counters) {
  std::string line = label;
  for (const auto& [name, value] : counters) {
    line += " " + std::string(name) + "=" + std::to_string(value);
  }
  std::printf("%s\n", line.c_str());
}

}  // namespace prefixkv::testing
