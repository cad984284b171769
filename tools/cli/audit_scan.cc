// What `prefixkv audit` and `prefixkv inspect` (and `prefixkv repair`) share:
// opening a stopped cache's data directory without ever creating one, listing
// its SSD tier's blocks, decoding each record with the block codec to check it
// is the block its key says, and walking the parent links (chains, unreachable
// blocks). Kept out of main.cc so both commands check the same things the same
// way; the tools read through the public Engine and SsdTier API only, so they
// see exactly what a restarted cache would see.
#include "tools/cli/audit_scan.h"

#include <filesystem>
#include <system_error>
#include <unordered_map>

#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/advanced/tip_lineage.h"
#include "prefixkv/codec.h"

namespace prefixkv::cli {

StatusOr<std::unique_ptr<Engine>> OpenExistingEngine(const std::string& dir,
                                                     std::vector<std::string>* log,
                                                     DirAccess access,
                                                     const EngineOptions* remote,
                                                     bool accept_missing_segments) {
  const bool repair = access == DirAccess::kRepair;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    // A file given as the directory is named as one, not as missing.
    return Status::NotFound(
        "data directory " + dir +
        (fs::exists(dir, ec) ? " is not a directory" : " does not exist"));
  }
  // RocksDB's CURRENT file names the live manifest, and segments/ holds the
  // blocks: with neither there is no database. A lost CURRENT beside intact
  // segments is damage (audit and inspect report it, repair rebuilds); beside
  // a segments/ with nothing to rebuild from (the drive not mounted), repair
  // refuses, so audit and inspect say to mount it (until 2026-12-07 they
  // said repair rebuilt it, and repair refused).
  if (!fs::exists(fs::path(dir) / "CURRENT", ec)) {
    if (!fs::is_directory(fs::path(dir) / "segments", ec)) {
      return Status::NotFound(dir + " holds no prefixkv database");
    }
    // Opening it would have RocksDB try to create a database there: audit and
    // inspect must not write, so they stop here.
    if (!repair && SsdTier::CanRebuildMetadata(dir)) {
      return Status::Corruption("metadata at " + dir +
                                " is damaged: its CURRENT file is missing (the "
                                "segments are there; `prefixkv repair` rebuilds it)");
    }
    if (!repair) {
      return Status::Corruption(
          "metadata at " + dir + " is damaged: its CURRENT file is missing, and " + dir +
          "/segments holds no segment file and no removal journal to rebuild it from: "
          "is the drive mounted (or --data-dir wrong)? Mount it and run again (then "
          "`prefixkv repair` rebuilds the metadata); only if the segments are lost for "
          "good, `prefixkv repair --accept-missing-segments` starts the directory empty");
    }
  }
  EngineOptions options;
  options.data_dir = dir;
  options.create_if_missing = false;
  options.hot_capacity_bytes = 0;  // a stopped cache has no hot tier to look at
  // The KV event log is not what the tools look at: opened, it cut a new
  // segment, reserved 65,536 more numbers in SEQ and rewrote the checkpoint on
  // every run, and made an events/ directory where the server kept none
  // (--no-event-log). Left closed it is as the server left it; the server's
  // next open reconciles the log with any block repair (or an audit) removed
  // (docs/events.md "Reconciliation").
  options.event_log = false;
  options.log = [log](std::string_view line) { log->emplace_back(line); };
  EngineHooks hooks;
  hooks.configure_ssd = [repair, access, accept_missing_segments](SsdTierOptions& ssd) {
    ssd.writer_threads = 1;                // nothing is queued: the tools only read
    ssd.repair_damaged_metadata = repair;  // audit and inspect only report
    ssd.read_only = access == DirAccess::kReadOnly;
    ssd.accept_missing_segments = accept_missing_segments;
  };
  if (remote != nullptr) {
    options.remote = remote->remote;
    options.remote_timeout_ms = remote->remote_timeout_ms;
  }
  return OpenEngine(options, std::move(hooks));
}

std::map<BlockKey, StoredBlock> Inventory(const SsdTier& tier) {
  std::map<BlockKey, StoredBlock> blocks;
  tier.ForEach([&](const BlockMeta& meta, uint64_t bytes) {
    blocks[meta.key] = StoredBlock{meta, bytes};
  });
  return blocks;
}

namespace {

// Why a record disagrees with its metadata; empty when it agrees.
std::string IdentityMismatch(const BlockRecord& rec, const BlockMeta& meta) {
  std::string why;
  auto check = [&why](const char* field, const BlockKey& got, const BlockKey& want) {
    if (got == want) return;
    if (!why.empty()) why += "; ";
    why +=
        std::string("record ") + field + " " + got.ToHex() + ", stored " + want.ToHex();
  };
  check("key", rec.key, meta.key);
  check("parent", rec.parent, meta.parent);
  check("namespace", rec.namespace_id, meta.namespace_id);
  return why;
}

}  // namespace

void CheckRecords(SsdTier& tier, const std::map<BlockKey, StoredBlock>& blocks,
                  std::vector<AuditFinding>* findings) {
  for (const auto& [key, block] : blocks) {
    if (block.meta.namespace_id.IsZero()) continue;  // raw blobs have no record
    const std::string what = "block " + key.ToHex() + " record";
    // No hit counted, no access-order refresh: an audit must not reorder eviction.
    StatusOr<SharedBytes> payload = tier.GetForAudit(key);
    if (!payload.ok()) {
      // A read the medium failed (the block kept): SsdTier::Audit named it
      // "unreadable" already; a "record" finding reads as a record that
      // does not decode from an intact payload.
      const Status& s = payload.status();
      if (!s.IsNotFound() && !s.IsCorruption()) continue;
      findings->push_back({what, "unreadable: " + s.ToString()});
      continue;
    }
    StatusOr<BlockRecord> rec = DecodeBlock(*payload);
    if (!rec.ok()) {
      findings->push_back({what, rec.status().ToString()});
      continue;
    }
    std::string why = IdentityMismatch(*rec, block.meta);
    if (why.empty() && key == TipLineage::RecordKey(block.meta.namespace_id)) {
      // The lineage record's layer must also parse as a lineage.
      StatusOr<TipLineage> lineage =
          TipLineage::FromRecord(*rec, block.meta.namespace_id);
      if (!lineage.ok()) why = "tip lineage: " + lineage.status().ToString();
    }
    if (!why.empty()) findings->push_back({what, why});
  }
}

StatusOr<std::vector<BlockKey>> RemoveUnreachable(SsdTier& tier,
                                                  const std::vector<BlockKey>& roots,
                                                  bool remove_roots) {
  std::unordered_map<BlockKey, std::vector<BlockKey>, BlockKeyHash> children;
  tier.ForEach([&](const BlockMeta& meta, uint64_t) {
    if (!meta.parent.IsZero()) children[meta.parent].push_back(meta.key);
  });
  std::vector<BlockKey> removed;
  std::vector<BlockKey> todo;
  for (const BlockKey& root : roots) {
    if (remove_roots) {
      PKV_RETURN_IF_ERROR(tier.Remove(root));
      removed.push_back(root);
    }
    todo.push_back(root);
  }
  // Each key has one parent, so a block is reached (and removed) once.
  while (!todo.empty()) {
    const BlockKey at = todo.back();
    todo.pop_back();
    auto it = children.find(at);
    if (it == children.end()) continue;
    for (const BlockKey& child : it->second) {
      PKV_RETURN_IF_ERROR(tier.Remove(child));
      removed.push_back(child);
      todo.push_back(child);
    }
  }
  return removed;
}

std::map<BlockKey, ChainSummary> LongestChains(
    const std::map<BlockKey, StoredBlock>& blocks) {
  auto is_chain_block = [](const StoredBlock& b) {
    return !b.meta.namespace_id.IsZero() &&
           b.meta.key != TipLineage::RecordKey(b.meta.namespace_id);
  };
  std::unordered_map<BlockKey, uint64_t, BlockKeyHash> depth;
  std::map<BlockKey, ChainSummary> longest;
  for (const auto& [key, block] : blocks) {
    if (!is_chain_block(block)) continue;
    // Walk up to a block of known depth or the chain's start, then unwind.
    // The walk is bounded by the block count, so a (hash-impossible) cycle
    // cannot loop forever.
    std::vector<BlockKey> path;
    BlockKey at = key;
    uint64_t base = 0;
    while (path.size() <= blocks.size()) {
      if (auto d = depth.find(at); d != depth.end()) {
        base = d->second;
        break;
      }
      path.push_back(at);
      const StoredBlock& here = blocks.at(at);
      auto parent = blocks.find(here.meta.parent);
      if (parent == blocks.end() || !is_chain_block(parent->second) ||
          parent->second.meta.namespace_id != block.meta.namespace_id) {
        break;
      }
      at = parent->first;
    }
    for (auto it = path.rbegin(); it != path.rend(); ++it) depth[*it] = ++base;
    ChainSummary& best = longest[block.meta.namespace_id];
    if (depth[key] > best.blocks) best = ChainSummary{key, depth[key]};
  }
  return longest;
}

}  // namespace prefixkv::cli
