// `prefixkv repair --data-dir D`: rebuilds a damaged metadata database of a
// stopped cache from the segment files' own records (docs/ssd.md "Metadata
// repair"); an intact one is opened, checked and left as it is.
#include <cstdio>
#include <string>
#include <vector>

#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/advanced/ssd_tier.h"
#include "tools/cli/audit_scan.h"
#include "tools/cli/command.h"
#include "tools/cli/flags.h"

namespace prefixkv::cli {
namespace {

constexpr const char* kRepairHelp = R"(
Opens the SSD tier in the data directory of a stopped prefixkv process and
brings its metadata (RocksDB: an index of the segment files) back in line
with the segment files and the removal journal, which are the truth:
  - a metadata database that cannot be opened or read, or is missing beside
    segment files that hold blocks, is rebuilt from the segment files, whose
    extents carry their own key, length and checksum: a block is restored
    when its payload is intact and it is provably the key's current value
    (the removal journal names every removed or superseded extent; two
    different versions of one key are both dropped). The damaged files, and
    segment files holding only blocks it could not prove, are kept in
    D/metadata.broken-<nanoseconds>/. The new database is built before the
    old one is trusted again: a kill at any moment, then repair again, gives
    the same result as one run;
  - an intact database older than the segments (its log was lost or deleted:
    it lacks committed blocks, or still holds removed ones) is rolled forward
    in place, in one atomic write;
  - a missing or damaged removal journal is regenerated from the intact
    metadata (every extent it does not reference is dead);
  - every payload is read and verified: a damaged block is removed, and so
    is every block chained below it, and every block whose parent is missing
    (an orphan) with the blocks below it: no prefix match can reach them.
    This reads the whole tier once.
A block whose payload cannot be read (its segment file unreadable: a
directory or a dangling link in its place, an I/O error) is kept with the
blocks below it and named; repair exits 1 until the file is put right.
Each change, including what the open itself did (a segment file no record
names deleted as crash garbage, an older layout's metadata moved aside,
counters repaired), is one line of the summary; "nothing to repair" means
nothing was changed. The server does the first three at open too (and logs
them); `prefixkv audit` only reports. Run it only while no other process has
the directory open.
When at least 9 in 10 of the segment files the metadata references are
missing and segments/ holds no removal journal either, the segments
vanished as a whole (the drive is not mounted, or the path is wrong):
repair, audit and the server refuse to change anything and say how many are
missing (exit 1). So do they when the metadata cannot be read and
segments/ holds no segment file and no removal journal to rebuild it from.
Mount the drive and run again; only if the segments are lost for good,
--accept-missing-segments repairs anyway, removing every block of the
missing segments (or rebuilding the unreadable metadata empty).

Exit codes here: 0 the tier is consistent now (repaired or already intact), 1 it
could not be opened or repaired, 2 usage error (bad flags, missing data
directory).
)";

// What the repairing open did before any rebuild or roll-forward: each one
// a change to the directory that the summary must name (after any of them,
// "nothing to repair" was untrue). True when it printed any.
bool PrintOpenRepairs(const SsdOpenReport& report) {
  bool repaired = false;
  if (!report.moved_aside_to.empty()) {
    repaired = true;
    std::printf(
        "metadata of an older or foreign layout moved to %s: its blocks are not "
        "served, the tier starts empty\n",
        report.moved_aside_to.c_str());
  }
  if (report.unreferenced_segments_deleted > 0) {
    repaired = true;
    std::printf(
        "deleted %llu unreferenced segment files (crash garbage no record names)\n",
        static_cast<unsigned long long>(report.unreferenced_segments_deleted));
  }
  if (report.corrupt_records_removed > 0) {
    repaired = true;
    std::printf("dropped %llu metadata records failing their own checksum\n",
                static_cast<unsigned long long>(report.corrupt_records_removed));
  }
  if (!report.counter_repairs.empty()) {
    repaired = true;
    std::printf("repaired %zu counters that disagreed with the blocks\n",
                report.counter_repairs.size());
  }
  return repaired;
}

// The blocks the audit removed, by why: `damaged` in all, of which
// `in_missing_segments` were in a segment file that is missing (their bytes
// are not there to fail a checksum: said so, an operator looks for a lost
// file, not for damaged bytes).
std::string DamagedBlocks(size_t damaged, size_t in_missing_segments) {
  std::string out;
  if (damaged > in_missing_segments) {
    out = std::to_string(damaged - in_missing_segments) +
          " blocks whose payload failed its checksum";
  }
  if (in_missing_segments > 0) {
    out += (out.empty() ? "" : ", ") + std::to_string(in_missing_segments) +
           " blocks whose segment file is missing";
  }
  return out;
}

// The audit's findings of reads the medium failed (a segment file with no
// readable file in its place, EIO): the blocks are kept, and nothing here
// can repair them. True when it printed any.
bool PrintUnreadable(const std::vector<AuditFinding>& findings) {
  size_t blocks = 0;
  std::string first;
  for (const AuditFinding& f : findings) {
    if (f.what.starts_with("segment ") && f.detail.starts_with("unreadable")) {
      std::printf("%s %s\n", f.what.c_str(), f.detail.c_str());
    } else if (f.what.starts_with("block ") && f.what.ends_with(" unreadable")) {
      if (blocks++ == 0) first = f.detail;
    }
  }
  if (blocks == 0) return false;
  std::printf(
      "kept %zu blocks whose payload could not be read (%s): put the file right "
      "and run repair again\n",
      blocks, first.c_str());
  return true;
}

int Repair(const std::vector<std::string>& args) {
  Flags flags(
      "prefixkv repair [--data-dir D] [--accept-missing-segments]",
      {{"data-dir", "data directory of the SSD tier", false, "./prefixkv-data"},
       {"accept-missing-segments",
        "repair even if 9 in 10 or more of the segment files the metadata "
        "references are missing, with no removal journal: their blocks are removed "
        "(or, the metadata unreadable and segments/ empty, rebuild it empty)",
        true, ""}});
  std::string error;
  if (!flags.Parse(args, &error)) return UsageError(flags, error);
  if (flags.help_requested()) {
    std::printf("%s%s", flags.HelpText().c_str(), kRepairHelp);
    return 0;
  }
  const std::string dir = flags.GetString("data-dir", "./prefixkv-data");
  std::vector<std::string> log;
  StatusOr<std::unique_ptr<Engine>> engine =
      OpenExistingEngine(dir, &log, DirAccess::kRepair, /*remote=*/nullptr,
                         flags.GetBool("accept-missing-segments"));
  for (const std::string& line : log) std::printf("%s\n", line.c_str());
  if (!engine.ok()) return OpenError(flags, "repair", engine.status());
  SsdTier& tier = *EngineSsdTier(**engine);
  const SsdOpenReport report = tier.open_report();
  // Every payload verified (SsdTier::Audit drops a damaged one), then what
  // no prefix match can reach any more: below a dropped block, and orphans.
  std::vector<AuditFinding> findings;
  Status audited = tier.Audit(&findings);
  std::vector<BlockKey> damaged;
  size_t in_missing_segments = 0;  // of `damaged`: no checksum failed
  for (const AuditFinding& f : findings) {
    if (!f.what.starts_with("block ") || !f.what.ends_with(" checksum")) continue;
    if (StatusOr<BlockKey> k = BlockKey::FromHex(f.what.substr(6, 32)); k.ok()) {
      damaged.push_back(*k);
      if (f.detail.ends_with(".seg missing")) in_missing_segments += 1;
    }
  }
  StatusOr<std::vector<BlockKey>> below =
      audited.ok() ? RemoveUnreachable(tier, damaged, /*remove_roots=*/false)
                   : StatusOr<std::vector<BlockKey>>(audited);
  StatusOr<std::vector<BlockKey>> orphans =
      below.ok() ? RemoveUnreachable(tier, tier.FindOrphans(), /*remove_roots=*/true)
                 : below;
  Status closed = (*engine)->Close();
  if (!orphans.ok() || !closed.ok()) {
    return Failure(flags, "repair",
                   (!orphans.ok() ? orphans.status() : closed).ToString());
  }
  bool repaired = PrintOpenRepairs(report);
  if (!report.metadata_damage.empty()) {
    repaired = true;
    std::printf(
        "rebuilt: %llu blocks restored, %llu intact records not provably current, %llu "
        "damaged records; damaged files kept in %s\n",
        static_cast<unsigned long long>(report.rebuilt_blocks),
        static_cast<unsigned long long>(report.rebuild_unprovable),
        static_cast<unsigned long long>(report.rebuild_damaged_extents),
        report.damaged_metadata_kept.c_str());
  }
  if (!report.metadata_rollback.empty()) {
    repaired = true;
    std::printf(
        "rolled forward: %llu blocks the metadata had lost restored, %llu removals it "
        "had lost applied, %llu intact records not provably current\n",
        static_cast<unsigned long long>(report.rolled_forward_restored),
        static_cast<unsigned long long>(report.rolled_forward_removed),
        static_cast<unsigned long long>(report.rollforward_unprovable));
  }
  if (report.journal_regenerated) {
    repaired = true;
    std::printf("removal journal regenerated (%s): %llu removals\n",
                report.journal_problem.c_str(),
                static_cast<unsigned long long>(report.journal_regenerated_removals));
  }
  if (report.journal_garbage_named > 0 || report.journal_live_recommitted > 0) {
    repaired = true;
    std::printf(
        "removal journal brought in line with the metadata: %llu extents nothing "
        "referenced (a store cut before its commit) journaled dead, %llu live blocks "
        "it excluded journaled committed\n",
        static_cast<unsigned long long>(report.journal_garbage_named),
        static_cast<unsigned long long>(report.journal_live_recommitted));
  }
  if (!damaged.empty()) {
    repaired = true;
    std::printf("removed %s and %zu blocks chained below them\n",
                DamagedBlocks(damaged.size(), in_missing_segments).c_str(),
                below->size());
  }
  if (!orphans->empty()) {
    repaired = true;
    std::printf(
        "removed %zu blocks unreachable from their namespace root (orphans and "
        "the blocks below them)\n",
        orphans->size());
  }
  // Not consistent yet: reads of those blocks fail until the file is back.
  if (PrintUnreadable(findings)) return kExitProblem;
  if (!repaired) {
    std::printf("metadata intact: %llu blocks, nothing to repair\n",
                static_cast<unsigned long long>(report.blocks));
  }
  return 0;
}

}  // namespace
}  // namespace prefixkv::cli

PKV_REGISTER_COMMAND("repair",
                     "rebuild a damaged metadata database from the segment files",
                     prefixkv::cli::Repair);
