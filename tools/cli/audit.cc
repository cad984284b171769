// `prefixkv audit --data-dir D [--json]`: checks a stopped cache's SSD tier
// against itself. Recomputes every counter from the contents and verifies
// every payload checksum (SsdTier::Audit, which removes damaged blocks), lists
// blocks whose parent link leads nowhere (SsdTier::FindOrphans), and decodes
// every chained block's record to check its own checksum and that its key,
// parent and namespace equal the stored metadata.
#include <cstdio>
#include <string>
#include <vector>

#include "prefixkv/advanced/engine_internals.h"
#include "tools/cli/audit_scan.h"
#include "tools/cli/command.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"

namespace prefixkv::cli {
namespace {

constexpr const char* kAuditHelp = R"(
Checks the SSD tier in the data directory of a stopped prefixkv process:
  - every tier counter, recomputed from the stored blocks (live and persisted);
  - every payload checksum (a damaged block is removed from the tier, so a
    later match stops before it, and reported);
  - every chain link: a block whose parent is neither its namespace root nor
    stored is an orphan;
  - every block record of a model namespace, decoded with the block codec:
    its own checksum, and its key, parent and namespace against the metadata.
Reading a record counts no hit and leaves the block's eviction order as it was.
A block whose payload fails its checksum is reported once: the audit removes
it, so the next audit no longer sees it, and with it every block chained
below it (they can never be matched again; reported as unreachable, removed).
A block whose parent is missing (an orphan) is reported; `prefixkv repair`
removes it and the blocks below it. A record that does not decode or disagrees with its
metadata, though its payload is intact, is reported and kept ("kept" in the
text, "removed": false in the JSON), so every audit reports it again.
Run it only while no other process has the directory open. An audit that
finds nothing wrong writes nothing in the directory (it is opened read-only);
one that finds a problem audits it again opened for writing, to remove what
is damaged; that open also deletes segment files no record names (crash
garbage, as a server's open does), reported as a mismatch. When at least 9 in
10 of the segment files the metadata references are missing and segments/
holds no removal journal either (a drive not mounted, a wrong path), that
open is refused (exit 1, saying how many are missing) and no block is
removed.
A metadata database that cannot be opened or read (a damaged log, table,
MANIFEST or CURRENT), or that is older than the segment files and the removal
journal (a lost log), is reported (exit 1) and left as it is: the audit never
moves, rebuilds or rolls forward anything; `prefixkv repair` does, except
beside a segments/ that holds no segment file and no removal journal (the
drive not mounted): there it refuses, and a CURRENT missing there is
reported with that (mount the drive and run again). A missing
or damaged removal journal is a problem too (a rebuild could prove nothing
with it): `prefixkv repair` regenerates it from the intact metadata.

--json prints one object: ok, blocks_checked, corrupt_blocks (list of
{key, detail, removed}), unreachable_blocks (list of {key, below}: removed
with a corrupt ancestor), orphan_blocks (list of {key, parent}),
counter_mismatches (list of {what, detail}); when the audit cannot run (no such directory, a
tier that cannot be opened) it prints {"ok":false,"error":"..."} instead,
with the same exit code as without --json.

Exit code 1: a discrepancy was found (or the tier could not be read); 2: a
usage error, a data directory that does not exist among them.
)";

struct BlockProblem {
  std::string key;  // block key, hex
  std::string detail;
  bool removed = false;  // a failed payload checksum: the tier dropped the block
};

struct AuditReport {
  std::string dir;
  uint64_t blocks_checked = 0;
  std::vector<BlockProblem> corrupt;
  std::vector<BlockProblem> orphans;      // detail: the missing parent, hex
  std::vector<BlockProblem> unreachable;  // detail: the removed ancestor, hex
  std::vector<AuditFinding> mismatches;
  bool previous_shutdown_clean = true;
  Status open_error;  // the directory could not be opened

  bool ok() const {
    return corrupt.empty() && orphans.empty() && unreachable.empty() &&
           mismatches.empty();
  }
};

// "block <32 hex> checksum" / "block <32 hex> record" name a damaged block;
// every other finding is a counter or index disagreement.
void Classify(const std::vector<AuditFinding>& findings, AuditReport* report) {
  for (const AuditFinding& f : findings) {
    const bool block = f.what.starts_with("block ") && f.what.size() > 6 + 32;
    const std::string tail = block ? f.what.substr(6 + 32) : "";
    if (tail == " checksum" || tail == " record") {
      report->corrupt.push_back({f.what.substr(6, 32), f.detail, tail == " checksum"});
    } else {
      report->mismatches.push_back(f);
    }
  }
}

// What Open repaired or could not read was wrong on disk when the audit began.
// `log` holds the tier's lines from Open, which say why a database was
// moved aside.
void AddOpenFindings(const SsdOpenReport& open, const std::vector<std::string>& log,
                     AuditReport* report) {
  report->previous_shutdown_clean = open.previous_shutdown_clean;
  if (!open.moved_aside_to.empty()) {
    std::string why;
    for (const std::string& line : log) {
      if (line.find("could not be opened") != std::string::npos) why = line;
    }
    report->mismatches.push_back(
        {"database", "moved aside to " + open.moved_aside_to + ": " + why});
  }
  // Only a writing open (the second pass, after a problem) deletes one, as
  // a server's open does: the audit deleted it and did not say so.
  if (open.unreferenced_segments_deleted > 0) {
    report->mismatches.push_back(
        {"segment files", std::to_string(open.unreferenced_segments_deleted) +
                              " unreferenced segment files (crash garbage no record "
                              "names) deleted at open"});
  }
  if (open.corrupt_records_removed > 0) {
    report->mismatches.push_back(
        {"metadata records", std::to_string(open.corrupt_records_removed) +
                                 " failed their checksum and were removed at open"});
  }
  if (open.incompatible_records > 0) {
    report->mismatches.push_back(
        {"records of an unknown layout version",
         std::to_string(open.incompatible_records) + " kept but not verifiable"});
  }
  if (!open.journal_problem.empty()) {
    report->mismatches.push_back(
        {"removal journal",
         open.journal_problem +
             " (a metadata rebuild could prove no block with it; `prefixkv repair` "
             "regenerates it from the intact metadata)"});
  }
  for (const AuditFinding& f : open.counter_repairs) {
    report->mismatches.push_back(
        {"persisted " + f.what, f.detail + " (repaired at open)"});
  }
}

Status RunAudit(SsdTier& tier, const std::vector<std::string>& log, AuditReport* report) {
  AddOpenFindings(tier.open_report(), log, report);
  report->blocks_checked = Inventory(tier).size();
  std::vector<AuditFinding> findings;
  PKV_RETURN_IF_ERROR(tier.Audit(&findings));
  // Damaged payloads are gone now; the records of the rest are decoded.
  const std::map<BlockKey, StoredBlock> blocks = Inventory(tier);
  CheckRecords(tier, blocks, &findings);
  Classify(findings, report);
  // The blocks chained below a removed one can never be matched again: they
  // go too, so the next audit is clean (issue 24).
  for (const BlockProblem& p : report->corrupt) {
    if (!p.removed) continue;
    StatusOr<BlockKey> root = BlockKey::FromHex(p.key);
    if (!root.ok()) continue;
    PKV_ASSIGN_OR_RETURN(std::vector<BlockKey> below,
                         RemoveUnreachable(tier, {*root}, /*remove_roots=*/false));
    for (const BlockKey& k : below)
      report->unreachable.push_back({k.ToHex(), p.key, true});
  }
  for (const BlockKey& key : tier.FindOrphans()) {
    auto it = blocks.find(key);
    const std::string parent =
        it == blocks.end() ? "unknown" : it->second.meta.parent.ToHex();
    report->orphans.push_back({key.ToHex(), parent});
  }
  return Status::OK();
}

void PrintJson(const AuditReport& r) {
  JsonWriter j;
  j.BeginObject().Field("ok", r.ok()).Field("blocks_checked", r.blocks_checked);
  j.Key("corrupt_blocks").BeginArray();
  for (const BlockProblem& p : r.corrupt) {
    j.BeginObject()
        .Field("key", p.key)
        .Field("detail", p.detail)
        .Field("removed", p.removed)
        .EndObject();
  }
  j.EndArray().Key("unreachable_blocks").BeginArray();
  for (const BlockProblem& p : r.unreachable) {
    j.BeginObject().Field("key", p.key).Field("below", p.detail).EndObject();
  }
  j.EndArray().Key("orphan_blocks").BeginArray();
  for (const BlockProblem& p : r.orphans) {
    j.BeginObject().Field("key", p.key).Field("parent", p.detail).EndObject();
  }
  j.EndArray().Key("counter_mismatches").BeginArray();
  for (const AuditFinding& f : r.mismatches) {
    j.BeginObject().Field("what", f.what).Field("detail", f.detail).EndObject();
  }
  j.EndArray().EndObject();
  std::printf("%s\n", j.str().c_str());
}

void PrintHuman(const AuditReport& r) {
  std::printf("prefixkv audit %s\n", r.dir.c_str());
  std::printf("  blocks checked: %llu\n",
              static_cast<unsigned long long>(r.blocks_checked));
  if (!r.previous_shutdown_clean) {
    std::printf("  note: the last process did not close the tier cleanly\n");
  }
  for (const BlockProblem& p : r.corrupt) {
    std::printf("  corrupt block %s: %s (%s)\n", p.key.c_str(), p.detail.c_str(),
                p.removed ? "removed" : "kept: its payload is intact");
  }
  for (const BlockProblem& p : r.unreachable) {
    std::printf("  unreachable block %s: chained below removed block %s (removed)\n",
                p.key.c_str(), p.detail.c_str());
  }
  for (const BlockProblem& p : r.orphans) {
    std::printf(
        "  orphan block %s: parent %s is not stored (`prefixkv repair` removes it)\n",
        p.key.c_str(), p.detail.c_str());
  }
  for (const AuditFinding& f : r.mismatches) {
    std::printf("  mismatch %s: %s\n", f.what.c_str(), f.detail.c_str());
  }
  const size_t problems =
      r.corrupt.size() + r.unreachable.size() + r.orphans.size() + r.mismatches.size();
  if (problems == 0) {
    std::printf("verdict: OK, everything agrees\n");
  } else {
    std::printf("verdict: %zu problem(s)\n", problems);
  }
}

// Audits `dir` opened with `access` into `report`: false when it could not
// be opened (report->open_error says why), an error when the audit failed.
StatusOr<bool> AuditWith(const std::string& dir, DirAccess access, AuditReport* report) {
  report->dir = dir;
  std::vector<std::string> log;
  StatusOr<std::unique_ptr<Engine>> engine = OpenExistingEngine(dir, &log, access);
  if (!engine.ok()) {
    report->open_error = engine.status();
    return false;
  }
  PKV_RETURN_IF_ERROR(RunAudit(*EngineSsdTier(**engine), log, report));
  PKV_RETURN_IF_ERROR((*engine)->Close());
  return true;
}

int Audit(const std::vector<std::string>& args) {
  Flags flags("prefixkv audit [--data-dir D] [--json]",
              {{"data-dir", "data directory of the SSD tier", false, "./prefixkv-data"},
               {"json", "print one JSON object", true, ""}});
  std::string error;
  if (!flags.Parse(args, &error)) return UsageError(flags, error);
  if (flags.help_requested()) {
    std::printf("%s%s", flags.HelpText().c_str(), kAuditHelp);
    return 0;
  }
  const std::string dir = flags.GetString("data-dir", "./prefixkv-data");
  // Read-only first: an audit that finds everything in order writes nothing
  // in the directory it proves (opened for writing, every audit flushed the
  // metadata log into a table, wrote a new MANIFEST and OPTIONS file and
  // compacted the removal journal). Only a directory with a problem (or one
  // the read-only open refused) is audited again as before, where a damaged
  // block is removed and the findings are reported as they always were.
  AuditReport report;
  StatusOr<bool> opened = AuditWith(dir, DirAccess::kReadOnly, &report);
  if (!opened.ok() || !*opened || !report.ok()) {
    report = AuditReport{};
    opened = AuditWith(dir, DirAccess::kReportOnly, &report);
  }
  if (!opened.ok()) return Failure(flags, "audit", opened.status().ToString());
  if (!*opened) return OpenError(flags, "audit", report.open_error);
  flags.GetBool("json") ? PrintJson(report) : PrintHuman(report);
  return report.ok() ? kExitOk : kExitProblem;
}

}  // namespace
}  // namespace prefixkv::cli

PKV_REGISTER_COMMAND("audit",
                     "check a data directory: counters, checksums, chain links, records",
                     prefixkv::cli::Audit);
