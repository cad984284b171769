// Shared by `prefixkv audit` and `prefixkv inspect`: opening an existing data
// directory without creating one, the block inventory of a stopped cache's
// SSD tier, the per-record codec checks and the chain walks.
//
// Not thread-safe: each command runs these once, on its own thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "prefixkv/advanced/ssd_tier.h"
#include "prefixkv/engine.h"

namespace prefixkv::cli {

// How a command opens a data directory.
enum class DirAccess {
  // Writes nothing in it (inspect, explain-miss, an audit that finds
  // nothing to remove): SsdTierOptions::read_only.
  kReadOnly,
  // May remove damaged blocks (audit), never repairs metadata.
  kReportOnly,
  // Rebuilds or rolls forward damaged metadata (repair).
  kRepair,
};

// Opens the engine of a stopped cache in `dir`: its SSD tier, no hot tier.
// NotFound when `dir` does not exist or holds no database (checked first, so
// neither command creates an empty database as a side effect). Every line the
// SSD tier logs is appended to `log`. A damaged metadata database is an
// error that changes nothing on disk unless kRepair (prefixkv repair): then
// it is rebuilt from the segment files (docs/ssd.md "Metadata repair").
// `remote` (explain-miss): its remote tier settings (remote,
// remote_timeout_ms) are used; nothing is written to the remote tier.
// A writing open of a directory whose segment files are (nearly) all missing
// is refused (Unavailable) unless `accept_missing_segments` (repair's flag):
// SsdTierOptions::accept_missing_segments.
StatusOr<std::unique_ptr<Engine>> OpenExistingEngine(
    const std::string& dir, std::vector<std::string>* log,
    DirAccess access = DirAccess::kReadOnly, const EngineOptions* remote = nullptr,
    bool accept_missing_segments = false);

struct StoredBlock {
  BlockMeta meta;
  uint64_t bytes = 0;  // payload bytes on disk
};

// Every stored block, by key.
std::map<BlockKey, StoredBlock> Inventory(const SsdTier& tier);

// Reads every block of a non-zero namespace and decodes it with the codec.
// Appends a finding ("block <hex> record", why) for each record that fails
// its own checksum or whose key, parent or namespace differ from the stored
// metadata, or (for a namespace's tip lineage record) whose layer does not
// parse as a lineage. Reads go through SsdTier::Get (the only verified read path), so
// each counts a hit and refreshes the block's access order.
void CheckRecords(SsdTier& tier, const std::map<BlockKey, StoredBlock>& blocks,
                  std::vector<AuditFinding>* findings);

// Removes every stored block whose parent link leads (through stored blocks)
// to one of `roots` (blocks just removed, or orphans, which are removed too
// when `remove_roots`): a prefix match walks from the namespace root, so
// such a block can never be served again, and an audit would report it
// forever (issue 24). Returns the removed keys; a failed Remove stops it.
StatusOr<std::vector<BlockKey>> RemoveUnreachable(SsdTier& tier,
                                                  const std::vector<BlockKey>& roots,
                                                  bool remove_roots);

// The longest parent-linked chain of one namespace.
struct ChainSummary {
  BlockKey tip;         // last block of the chain
  uint64_t blocks = 0;  // blocks from the namespace root to `tip`
};

// Longest chain per namespace (by namespace id), following parent links
// through stored blocks of the same namespace. Raw blobs (zero namespace) and
// the tip lineage record are not chain blocks.
std::map<BlockKey, ChainSummary> LongestChains(
    const std::map<BlockKey, StoredBlock>& blocks);

}  // namespace prefixkv::cli
