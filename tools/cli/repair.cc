// `prefixkv repair --data-dir D`: rebuilds a damaged metadata database of a
// stopped cache from the segment files' own records (docs/ssd.md "Metadata
// repair"); an intact one is opened, checked and left as it is.
#include <cstdio>
#include <string>
#include <vector>

#include "prefixkv/advanced/ssd_tier.h"
#include "tools/cli/audit_scan.h"
#include "tools/cli/command.h"
#include "tools/cli/flags.h"

namespace prefixkv::cli {
namespace {

constexpr const char* kRepairHelp = R"(
Opens the SSD tier in the data directory of a stopped prefixkv process. When
its metadata database (RocksDB: log, tables, MANIFEST, CURRENT) cannot be
opened or read, it is rebuilt from the segment files, whose extents carry
their own key, length and checksum: a block is restored when its payload is
intact and it is provably the key's current value (the removal journal names
every removed or superseded extent; two different versions of one key are
both dropped). The damaged files are kept in D/metadata.broken-<nanoseconds>/.
The server does the same at open (and logs it); `prefixkv audit` only reports.
Run it only while no other process has the directory open.

exit codes: 0 the database is intact or was rebuilt, 1 it could not be
opened or rebuilt, 2 usage error (bad flags, missing data directory).
)";

int Repair(const std::vector<std::string>& args) {
  Flags flags("prefixkv repair [--data-dir D]",
              {{"data-dir", "data directory of the SSD tier", false, "./prefixkv-data"}});
  std::string error;
  if (!flags.Parse(args, &error)) return UsageError(flags, error);
  if (flags.help_requested()) {
    std::printf("%s%s", flags.HelpText().c_str(), kRepairHelp);
    return 0;
  }
  if (!flags.positional().empty()) return UsageError(flags, "unexpected argument");
  const std::string dir = flags.GetString("data-dir", "./prefixkv-data");
  std::vector<std::string> log;
  StatusOr<std::unique_ptr<Engine>> engine =
      OpenExistingEngine(dir, &log, /*repair=*/true);
  for (const std::string& line : log) std::printf("%s\n", line.c_str());
  if (!engine.ok()) {
    if (engine.status().IsNotFound())
      return UsageError(flags, engine.status().ToString());
    std::fprintf(stderr, "prefixkv repair: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  const SsdOpenReport report = (*engine)->ssd_tier()->open_report();
  if (Status s = (*engine)->Close(); !s.ok()) {
    std::fprintf(stderr, "prefixkv repair: %s\n", s.ToString().c_str());
    return 1;
  }
  if (report.metadata_damage.empty()) {
    std::printf("metadata intact: %llu blocks, nothing to repair\n",
                static_cast<unsigned long long>(report.blocks));
  } else {
    std::printf(
        "rebuilt: %llu blocks restored, %llu intact records not provably current, %llu "
        "damaged records; damaged files kept in %s\n",
        static_cast<unsigned long long>(report.rebuilt_blocks),
        static_cast<unsigned long long>(report.rebuild_unprovable),
        static_cast<unsigned long long>(report.rebuild_damaged_extents),
        report.damaged_metadata_kept.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace prefixkv::cli

PKV_REGISTER_COMMAND("repair",
                     "rebuild a damaged metadata database from the segment files",
                     prefixkv::cli::Repair);
