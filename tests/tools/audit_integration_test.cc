// `prefixkv audit` against real data directories: a clean one passes; a
// flipped payload byte, a record stored under the wrong metadata and a
// removed parent each fail naming the block; usage errors exit 2 (as JSON
// with --json). And the exit-code table every command keeps (CliExitCodes,
// tools/cli/flags.h): 0 ok, 1 a problem found, 2 usage, each failure as
// {"ok":false,"error":"..."} under --json.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "prefixkv/advanced/prefix_cache.h"
#include "prefixkv/advanced/tier_stack.h"
#include "prefixkv/advanced/tip_lineage.h"
#include "prefixkv/version.h"
#include "tests/server/resp_client.h"
#include "tests/server/serve_process.h"
#include "tests/support/test_util.h"
#include "tests/tools/data_dir_builder.h"

namespace prefixkv {
namespace {

namespace fs = std::filesystem;
using testing::CliRun;
using testing::DataDirBuilder;
using testing::RunCli;

// Flips one byte inside every occurrence of `pattern` in the files under
// `dir`; returns the files changed.
std::vector<std::string> FlipBytesOf(const std::string& dir, const std::string& pattern) {
  std::vector<std::string> changed;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    in.close();
    bool hit = false;
    for (size_t at = bytes.find(pattern); at != std::string::npos;
         at = bytes.find(pattern, at + 1)) {
      bytes[at + 10] = static_cast<char>(bytes[at + 10] ^ 0x5A);
      hit = true;
    }
    if (!hit) continue;
    std::ofstream(e.path(), std::ios::binary | std::ios::trunc) << bytes;
    changed.push_back(e.path().filename().string());
  }
  return changed;
}

class AuditTest : public ::testing::Test {
 protected:
  DataDirBuilder data_{testing::TestSeed("AuditTest")};
  std::string Audit() const { return "audit --json --data-dir " + data_.dir(); }
  // A segment file no record names (crash garbage); returns its path.
  fs::path AddAGarbageSegment() const {
    const fs::path garbage = fs::path(data_.dir()) / "segments" / "00000000000fffff.seg";
    std::ofstream(garbage, std::ios::binary) << std::string(4096, '\0');
    return garbage;
  }
};

TEST_F(AuditTest, CleanDataDirectoryPasses) {
  data_.StoreChain();
  CliRun run = RunCli(Audit());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("\"ok\":true"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("\"blocks_checked\":5"), std::string::npos) << run.output;
}

TEST_F(AuditTest, FlippedPayloadByteIsReportedAndMatchStopsBeforeIt) {
  data_.StoreChain();
  const std::vector<std::string> changed = FlipBytesOf(data_.dir(), data_.pattern(2));
  ASSERT_FALSE(changed.empty());

  CliRun run = RunCli(Audit());
  EXPECT_EQ(run.exit_code, 1) << run.output
                              << " changed: " << ::testing::PrintToString(changed);
  EXPECT_NE(run.output.find("\"ok\":false"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(data_.keys()[2].ToHex()), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find(data_.keys()[1].ToHex()), std::string::npos)
      << "only the damaged block is named: " << run.output;

  std::unique_ptr<SsdTier> ssd = data_.Open();
  TierStack stack(nullptr, ssd.get());
  PrefixCache cache(&stack);
  Namespace ns = cache.RegisterModel(data_.spec()).value();
  StatusOr<MatchResult> match = cache.Match(ns, data_.tokens());
  ASSERT_OK(match);
  EXPECT_EQ(match->matched_tokens(), 2 * DataDirBuilder::kBlockTokens);
}

TEST_F(AuditTest, RecordStoredUnderOtherMetadataIsReported) {
  data_.StoreChain();
  {
    std::unique_ptr<SsdTier> tier = data_.Open();
    // Block 3's slot now holds block 1's record: both checksums are intact,
    // only the record's identity disagrees with the metadata.
    BlockMeta meta{data_.keys()[3], data_.keys()[2], data_.root(), 0};
    ASSERT_OK(tier->Put(meta, data_.Encode(1), false));
    ASSERT_OK(tier->Close());
  }
  CliRun run = RunCli("audit --data-dir " + data_.dir());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("corrupt block " + data_.keys()[3].ToHex()),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("record key " + data_.keys()[1].ToHex()), std::string::npos)
      << run.output;
  // Its payload is intact, so the audit keeps it, says so (it used to say
  // "removed"), and the next audit reports it again.
  EXPECT_NE(run.output.find("(kept: its payload is intact)"), std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("(removed)"), std::string::npos) << run.output;
  CliRun again = RunCli("audit --json --data-dir " + data_.dir());
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_NE(again.output.find("\"key\":\"" + data_.keys()[3].ToHex()), std::string::npos)
      << again.output;
  EXPECT_NE(again.output.find("\"removed\":false"), std::string::npos) << again.output;
}

TEST_F(AuditTest, LineageRecordThatIsNoLineageIsReported) {
  data_.StoreChain();
  const BlockKey record_key = TipLineage::RecordKey(data_.root());
  {
    std::unique_ptr<SsdTier> tier = data_.Open();
    BlockRecord rec;  // right identity, but no lineage layer
    rec.key = record_key;
    rec.parent = data_.root();
    rec.namespace_id = data_.root();
    BlockMeta meta{record_key, data_.root(), data_.root(), 0};
    ASSERT_OK(tier->Put(meta, EncodeBlock(rec).value(), false));
    ASSERT_OK(tier->Close());
  }
  CliRun run = RunCli(Audit());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(
      run.output.find("{\"key\":\"" + record_key.ToHex() + "\",\"detail\":\"tip lineage"),
      std::string::npos)
      << run.output;
}

TEST_F(AuditTest, RemovedParentLeavesAnOrphan) {
  data_.StoreChain();
  {
    std::unique_ptr<SsdTier> tier = data_.Open();
    ASSERT_OK(tier->Remove(data_.keys()[1]));
    ASSERT_OK(tier->Close());
  }
  CliRun run = RunCli(Audit());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("\"orphan_blocks\":[{\"key\":\"" + data_.keys()[2].ToHex()),
            std::string::npos)
      << run.output;
}

// Issue 24, point 5: after one corrupt block, audit used to fail forever: it
// removed the damaged block, its descendants stayed as orphans nothing
// removed, and repair said "nothing to repair". Now the audit removes the
// blocks chained below the one it removes (they can never be matched again),
// and the next audit is clean.
TEST_F(AuditTest, ACorruptBlocksDescendantsGoWithItSoTheNextAuditIsClean) {
  data_.StoreChain();
  ASSERT_FALSE(FlipBytesOf(data_.dir(), data_.pattern(1)).empty());
  CliRun run = RunCli(Audit());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  for (size_t i : {2, 3}) {
    EXPECT_NE(run.output.find("{\"key\":\"" + data_.keys()[i].ToHex() +
                              "\",\"below\":\"" + data_.keys()[1].ToHex()),
              std::string::npos)
        << i << ": " << run.output;
  }
  CliRun human = RunCli("audit --data-dir " + data_.dir());
  EXPECT_EQ(human.exit_code, 0) << "a second audit still fails:\n" << human.output;
  std::unique_ptr<SsdTier> ssd = data_.Open();
  EXPECT_OK(ssd->Peek(data_.keys()[0]).status());
  for (size_t i : {1, 2, 3}) EXPECT_FALSE(ssd->Peek(data_.keys()[i]).ok()) << i;
  EXPECT_TRUE(ssd->FindOrphans().empty());
}

// An orphan left by a removed parent is reported until `prefixkv repair`
// removes it and the blocks below it; then audit is clean.
TEST_F(AuditTest, RepairRemovesOrphansAndTheBlocksBelowThem) {
  data_.StoreChain();
  {
    std::unique_ptr<SsdTier> tier = data_.Open();
    ASSERT_OK(tier->Remove(data_.keys()[1]));
    ASSERT_OK(tier->Close());
  }
  EXPECT_EQ(RunCli(Audit()).exit_code, 1);
  CliRun repair = RunCli("repair --data-dir " + data_.dir());
  EXPECT_EQ(repair.exit_code, 0) << repair.output;
  EXPECT_NE(repair.output.find("removed 2 blocks unreachable"), std::string::npos)
      << repair.output;
  CliRun again = RunCli(Audit());
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("\"blocks_checked\":2"), std::string::npos) << again.output;
}

// A repair whose open changed the directory says so: a segment file no record
// names (crash garbage) is deleted by the open, and the summary names it.
// (It said "metadata intact: 5 blocks, nothing to repair", as it did after
// moving an older layout's metadata aside or repairing counters.)
TEST_F(AuditTest, RepairNamesTheUnreferencedSegmentItsOpenDeleted) {
  data_.StoreChain();
  const fs::path garbage = AddAGarbageSegment();
  CliRun repair = RunCli("repair --data-dir " + data_.dir());
  EXPECT_EQ(repair.exit_code, 0) << repair.output;
  EXPECT_FALSE(fs::exists(garbage));
  EXPECT_EQ(repair.output.find("nothing to repair"), std::string::npos) << repair.output;
  EXPECT_NE(repair.output.find("deleted 1 unreferenced segment files"), std::string::npos)
      << repair.output;
}

// An audit that finds a problem audits again opened for writing, and that
// open deletes a segment file no record names (crash garbage), as a
// server's does: the audit deleted it and its report did not say so.
TEST_F(AuditTest, AnAuditNamesTheUnreferencedSegmentItsWritingOpenDeleted) {
  data_.StoreChain();
  const fs::path garbage = AddAGarbageSegment();
  ASSERT_FALSE(FlipBytesOf(data_.dir(), data_.pattern(3)).empty());
  CliRun run = RunCli("audit --data-dir " + data_.dir());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_FALSE(fs::exists(garbage));
  EXPECT_NE(run.output.find("1 unreferenced segment files"), std::string::npos)
      << run.output;
}

// segments/ empty while the metadata references its segment (an SSD mount
// point not mounted): audit's writing pass removed every block as corrupt,
// and repair regenerated a journal there and removed them too (exit 0). Both
// now refuse (exit 1), naming the count, and change nothing (no file of the
// directory written, RocksDB's included): with the
// segments back the audit is clean; repair --accept-missing-segments removes
// the blocks when they are lost for good, naming why (it said their payload
// failed its checksum).
TEST_F(AuditTest, SegmentsThatVanishedAsAWholeAreNotRemovedByAuditOrRepair) {
  data_.StoreChain();
  const fs::path segments = fs::path(data_.dir()) / "segments";
  const fs::path mounted = fs::path(data_.dir()).parent_path() / "mounted";
  auto unmount = [&] {
    fs::rename(segments, mounted);
    fs::create_directory(segments);
  };
  unmount();
  const auto before = testing::SnapshotOf(data_.dir());
  for (const std::string command : {"audit", "repair"}) {
    CliRun run = RunCli(command + " --data-dir " + data_.dir());
    EXPECT_EQ(run.exit_code, 1) << command << ": " << run.output;
    EXPECT_NE(run.output.find("1 of 1 segment files"), std::string::npos) << run.output;
    EXPECT_TRUE(fs::is_empty(segments)) << command << " wrote in segments/";
    // "Refused, nothing changed": RocksDB's writing open had replayed the
    // log into a table and written a new MANIFEST, OPTIONS file and log,
    // and the space reserve was written again.
    EXPECT_EQ(testing::ChangesBetween(before, testing::SnapshotOf(data_.dir())), "")
        << command;
  }
  fs::remove(segments);
  fs::rename(mounted, segments);
  CliRun back = RunCli(Audit());
  EXPECT_EQ(back.exit_code, 0) << back.output;
  EXPECT_NE(back.output.find("\"blocks_checked\":5"), std::string::npos) << back.output;
  unmount();
  CliRun accepted = RunCli("repair --accept-missing-segments --data-dir " + data_.dir());
  EXPECT_EQ(accepted.exit_code, 0) << accepted.output;
  EXPECT_NE(accepted.output.find("removed 5 blocks"), std::string::npos)
      << accepted.output;
  // Named as blocks of a missing file: "failed its checksum" sent an
  // operator after damaged bytes.
  EXPECT_NE(accepted.output.find("5 blocks whose segment file is missing"),
            std::string::npos)
      << accepted.output;
  EXPECT_EQ(accepted.output.find("checksum"), std::string::npos) << accepted.output;
}

// A segment file's name with something unreadable in its place (a directory
// here; a dangling link, a file whose reads fail with EIO alike) is no proof
// its blocks are gone: the tier keeps them (docs/ssd.md, step 5 of "Open and
// recovery"). The audit's payload check reported each of its blocks as
// failing its checksum, so audit's writing pass and repair removed every
// block chained below them (all but the chain's first block here, the
// intact segments' blocks alike), said so as if the blocks were damaged,
// and with the file back those blocks were gone. Now each audit names the
// blocks unreadable, exit 1 (repair: the tier is not consistent), removes
// nothing, and with the file back the audit is clean.
TEST_F(AuditTest, AnUnreadableSegmentLosesNoBlockToAuditOrRepair) {
  data_.StoreChain();
  std::vector<fs::path> seg;
  for (const fs::directory_entry& e : fs::directory_iterator(data_.dir() + "/segments")) {
    if (e.path().extension() == ".seg") seg.push_back(e.path());
  }
  ASSERT_EQ(seg.size(), 1u);
  const fs::path aside = fs::path(data_.dir()).parent_path() / "segment-aside";
  fs::rename(seg[0], aside);
  fs::create_directory(seg[0]);
  for (const std::string command : {"audit", "repair"}) {
    CliRun run = RunCli(command + " --data-dir " + data_.dir());
    EXPECT_EQ(run.exit_code, 1) << command << ": " << run.output;
    EXPECT_NE(run.output.find("unreadable"), std::string::npos) << run.output;
    EXPECT_EQ(run.output.find("checksum"), std::string::npos) << run.output;
    EXPECT_EQ(run.output.find("removed"), std::string::npos) << run.output;
  }
  fs::remove(seg[0]);
  fs::rename(aside, seg[0]);
  CliRun back = RunCli(Audit());
  EXPECT_EQ(back.exit_code, 0) << back.output;
  EXPECT_NE(back.output.find("\"blocks_checked\":5"), std::string::npos) << back.output;
}

// Point 4: a missing or damaged removal journal is a finding (a later rebuild
// could prove nothing with it: before, audit said OK and a rebuild then
// restored 0 of 1,900 blocks); repair regenerates it and audit is clean.
TEST_F(AuditTest, AMissingOrDamagedJournalIsReportedAndRepairRegeneratesIt) {
  data_.StoreChain();
  const fs::path journal = fs::path(data_.dir()) / "segments" / "removals.pkvj";
  for (const bool damage : {false, true}) {
    ASSERT_TRUE(fs::exists(journal));
    if (damage) {
      std::fstream f(journal, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(20);
      f.put('\x7f');
    } else {
      fs::remove(journal);
    }
    CliRun run = RunCli("audit --data-dir " + data_.dir());
    EXPECT_EQ(run.exit_code, 1) << run.output;
    EXPECT_NE(run.output.find("removal journal"), std::string::npos) << run.output;
    CliRun repair = RunCli("repair --data-dir " + data_.dir());
    EXPECT_EQ(repair.exit_code, 0) << repair.output;
    EXPECT_NE(repair.output.find("removal journal regenerated"), std::string::npos)
        << repair.output;
    CliRun again = RunCli("audit --data-dir " + data_.dir());
    EXPECT_EQ(again.exit_code, 0) << again.output;
  }
}

TEST(AuditUsageTest, MissingDirectoryIsAUsageErrorAndCreatesNothing) {
  testing::TempDir tmp;
  const fs::path missing = tmp.path() / "nothing-here";
  CliRun run = RunCli("audit --data-dir " + missing.string());
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_FALSE(fs::exists(missing));
}

// A file given as the data directory is named as what it is (the error said
// it "does not exist"), a usage error, and left alone.
TEST(AuditUsageTest, AFileGivenAsTheDataDirectoryIsNamedAsOne) {
  testing::TempDir tmp;
  const std::string file = tmp.str() + "/a-file";
  std::ofstream(file) << "not a data directory\n";
  for (const char* command : {"audit", "inspect", "repair"}) {
    CliRun run = RunCli(std::string(command) + " --data-dir " + file);
    EXPECT_EQ(run.exit_code, 2) << command << ": " << run.output;
    EXPECT_NE(run.output.find("data directory " + file + " is not a directory"),
              std::string::npos)
        << command << ": " << run.output;
    EXPECT_EQ(fs::file_size(file), 21u) << command;
  }
}

TEST(AuditUsageTest, DirectoryWithoutDatabaseIsAUsageError) {
  testing::TempDir tmp;
  CliRun run = RunCli("audit --data-dir " + tmp.str());
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(fs::is_empty(tmp.path()));
}

// With --json the failure is JSON too (on stdout; the message also goes to
// stderr): one line {"ok":false,"error":"..."}, the exit code unchanged.
TEST(AuditUsageTest, JsonReportsADirectoryItCannotOpenAsJson) {
  testing::TempDir tmp;
  const fs::path missing = tmp.path() / "nothing-here";
  CliRun run = RunCli("audit --json --data-dir " + missing.string());
  EXPECT_EQ(run.exit_code, 2) << run.output;
  const std::string prefix = "{\"ok\":false,\"error\":\"";
  const size_t at = run.output.find(prefix);
  ASSERT_NE(at, std::string::npos) << run.output;
  EXPECT_TRUE(at == 0 || run.output[at - 1] == '\n') << run.output;
  const std::string line = run.output.substr(at, run.output.find('\n', at) - at);
  EXPECT_EQ(line.back(), '}') << line;
  EXPECT_NE(line.find("nothing-here"), std::string::npos) << line;
}

// A data directory a running server holds: one line naming its PID (issue
// 26), not RocksDB's raw lock error; exit 1, and nothing changes.
TEST(AuditUsageTest, ADirectoryInUseNamesTheProcessHoldingIt) {
  testing::TempDir dir;
  const std::string data = dir.str() + "/data";
  testing::ServeProcess serve(data);
  ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
  CliRun run = RunCli("audit --data-dir " + data);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("is in use by another process (pid " +
                            std::to_string(serve.pid()) + ")"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("Resource temporarily unavailable"), std::string::npos)
      << run.output;
  EXPECT_EQ(serve.StopWith(SIGTERM), 0);
}

// A lock /proc/locks names no process for (an open file description lock,
// F_OFD_SETLK, is listed with pid -1) held on the directory's LOCK: audit,
// inspect and repair said it was 'in use by another process (pid -1)', a pid
// no process has; they now say another process holds it, name no pid, and
// leave the directory as it was.
TEST(AuditUsageTest, ALockHeldWithoutAPidNamesNoPid) {
  DataDirBuilder builder(7);
  builder.StoreChain();
  const std::string data = builder.dir();
  const int fd = ::open((data + "/LOCK").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  ASSERT_EQ(::fcntl(fd, F_OFD_SETLK, &lock), 0) << std::strerror(errno);
  const std::map<std::string, std::string> before = testing::SnapshotOf(data);
  for (const char* command : {"audit", "inspect", "repair"}) {
    CliRun run = RunCli(std::string(command) + " --data-dir " + data);
    EXPECT_EQ(run.exit_code, 1) << command << ": " << run.output;
    EXPECT_NE(run.output.find("is in use by another process"), std::string::npos)
        << command << ": " << run.output;
    EXPECT_EQ(run.output.find("(pid"), std::string::npos)
        << command << ": " << run.output;
    EXPECT_EQ(testing::ChangesBetween(before, testing::SnapshotOf(data)), "") << command;
  }
  ::close(fd);
}

// Refused beside a running server, audit and inspect leave its directory
// exactly as it was: they deleted the server's space reserve and wrote it
// again after the database's lock refused them (a server whose writes took
// the freed room meanwhile was left without one).
TEST(AuditUsageTest, ADirectoryInUseIsLeftExactlyAsItWas) {
  testing::TempDir dir;
  const std::string data = dir.str() + "/data";
  testing::ServeProcess serve(data);
  ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
  ASSERT_TRUE(fs::exists(data + "/space-reserve"));
  const std::map<std::string, std::string> before = testing::SnapshotOf(data);
  for (const char* command : {"audit", "audit --json", "inspect", "inspect --json"}) {
    CliRun run = RunCli(std::string(command) + " --data-dir " + data);
    EXPECT_EQ(run.exit_code, 1) << command << ": " << run.output;
    EXPECT_NE(run.output.find("is in use by another process"), std::string::npos)
        << command << ": " << run.output;
    EXPECT_EQ(testing::ChangesBetween(before, testing::SnapshotOf(data)), "") << command;
  }
  EXPECT_EQ(serve.StopWith(SIGTERM), 0);
}

// The KV event log a stopped server left is not the tools' to write: each
// audit, inspect or repair cut a new log segment, reserved more numbers in
// SEQ and rewrote the checkpoint, and made an events/ directory in a data
// directory whose server ran with --no-event-log.
TEST(AuditUsageTest, AStoppedServersEventLogIsLeftAsItWas) {
  testing::TempDir dir;
  for (const bool event_log : {true, false}) {
    const std::string data = dir.str() + (event_log ? "/with-log" : "/without-log");
    {
      testing::ServeProcess serve(data, event_log
                                            ? std::vector<std::string>{}
                                            : std::vector<std::string>{"--no-event-log"});
      ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
      ASSERT_EQ(serve.StopWith(SIGTERM), 0);
    }
    const std::string events = data + "/events";
    ASSERT_EQ(fs::exists(events), event_log);
    const std::map<std::string, std::string> before =
        event_log ? testing::SnapshotOf(events) : std::map<std::string, std::string>{};
    for (const char* command : {"audit", "inspect", "repair"}) {
      CliRun run = RunCli(std::string(command) + " --data-dir " + data);
      EXPECT_EQ(run.exit_code, 0) << command << ": " << run.output;
      ASSERT_EQ(fs::exists(events), event_log) << command;
      if (event_log) {
        EXPECT_EQ(testing::ChangesBetween(before, testing::SnapshotOf(events)), "")
            << command;
      }
    }
  }
}

// The space reserve a stopped server left (its room on a full disk) is not
// the tools' to touch: audit and inspect deleted and wrote it again at every
// open, and on a nearly full disk the database's own files took the freed
// room first, leaving the directory without its reserve.
TEST(AuditUsageTest, AStoppedServersSpaceReserveIsLeftAsItWas) {
  testing::TempDir dir;
  const std::string data = dir.str() + "/data";
  {
    testing::ServeProcess serve(data);
    ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
    ASSERT_EQ(serve.StopWith(SIGTERM), 0);
  }
  const auto reserve = [&] { return testing::SnapshotOf(data).at("space-reserve"); };
  const std::string before = reserve();
  for (const char* command : {"audit", "inspect", "audit --json", "inspect --json"}) {
    CliRun run = RunCli(std::string(command) + " --data-dir " + data);
    EXPECT_EQ(run.exit_code, 0) << command << ": " << run.output;
    EXPECT_EQ(reserve(), before) << command;
  }
}

// The segment files a stopped cache left sparse (most of their blocks
// removed) are the next server's to compact: audit and inspect moved every
// live block of such a segment to a new one and deleted it.
TEST(AuditUsageTest, AuditAndInspectMoveNoBlock) {
  DataDirBuilder data(testing::TestSeed("AuditAndInspectMoveNoBlock"));
  {
    std::unique_ptr<SsdTier> tier = data.Open();
    const std::string payload(64 << 10, 'p');
    for (uint64_t i = 1; i <= 20; ++i) {
      ASSERT_OK(tier->Put(BlockMeta{BlockKey{0, i}, {}, {}, 0},
                          SharedBytes::Copy(std::string_view(payload)), false));
    }
    for (uint64_t i = 1; i <= 18; ++i) ASSERT_OK(tier->Remove(BlockKey{0, i}));
    ASSERT_OK(tier->Close());
  }
  const auto segment_files = [&] {
    std::map<std::string, std::string> files;
    for (const auto& [path, state] : testing::SnapshotOf(data.dir() + "/segments")) {
      if (path.ends_with(".seg")) files[path] = state;
    }
    return files;
  };
  const std::map<std::string, std::string> before = segment_files();
  ASSERT_FALSE(before.empty());
  for (const char* command : {"inspect", "audit"}) {
    CliRun run = RunCli(std::string(command) + " --data-dir " + data.dir());
    EXPECT_EQ(run.exit_code, 0) << command << ": " << run.output;
    EXPECT_EQ(testing::ChangesBetween(before, segment_files()), "") << command;
  }
}

// A server killed before its clean close is reported by every audit until a
// server (or repair) opens the directory again: an audit or inspect closed
// the tier cleanly itself, so the next audit no longer noted the unclean
// stop (and the next server logged "clean", not "recovered").
TEST(AuditUsageTest, AnUncleanStopIsReportedByEveryAudit) {
  testing::TempDir dir;
  const std::string data = dir.str() + "/data";
  {
    testing::ServeProcess serve(data);
    ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
    serve.StopWith(SIGKILL);
  }
  const std::string note = "the last process did not close the tier cleanly";
  for (const char* command : {"audit", "inspect", "audit"}) {
    CliRun run = RunCli(std::string(command) + " --data-dir " + data);
    EXPECT_EQ(run.exit_code, 0) << command << ": " << run.output;
    if (std::string(command) == "audit") {
      EXPECT_NE(run.output.find(note), std::string::npos) << run.output;
    }
  }
}

// A server that stored 50 values write-through and deleted 10, then was
// killed: its metadata log, removal journal and unclean marker are as the
// kill left them.
void LeaveAKilledServersDirectory(const std::string& data) {
  testing::ServeProcess serve(data, {"--write-through"});
  ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
  testing::RespClient client(serve.port());
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(client.Call({"SET", "k" + std::to_string(i), "v" + std::to_string(i)}).str,
              "OK");
  }
  for (int i = 0; i < 10; ++i) client.Call({"DEL", "k" + std::to_string(i)});
  serve.StopWith(SIGKILL);
}

// What a killed server left is the evidence audit, inspect and explain-miss
// look at: they write nothing there. Opened for writing, each run flushed
// the killed server's metadata log into a table, wrote a new MANIFEST,
// OPTIONS file and log, and rewrote the removal journal, compacted (the
// records of the segments' history it drops are what a later rebuild or
// roll-forward decides by).
TEST(AuditUsageTest, ReadOnlyCommandsLeaveAKilledServersDirectoryExactlyAsItWas) {
  testing::TempDir dir;
  const std::string data = dir.str() + "/data";
  LeaveAKilledServersDirectory(data);
  const std::string tokens = dir.str() + "/tokens";
  std::ofstream(tokens) << "1 2 3 4\n";
  const std::map<std::string, std::string> before = testing::SnapshotOf(data);
  for (const std::string& command : std::vector<std::string>{
           "inspect", "inspect --json", "audit", "audit --json",
           "explain-miss --model m --layers KVCache --block-tokens 2 --tokens " +
               tokens}) {
    CliRun run = RunCli(command + " --data-dir " + data);
    EXPECT_EQ(run.exit_code, 0) << command << ": " << run.output;
    EXPECT_EQ(testing::ChangesBetween(before, testing::SnapshotOf(data)), "") << command;
  }
  // And the server's next open finds it as the kill left it.
  testing::ServeProcess serve(data, {"--write-through"});
  ASSERT_NE(serve.port(), 0) << "prefixkv serve did not start";
  testing::RespClient client(serve.port());
  EXPECT_EQ(client.Call({"GET", "k49"}).str, "v49");
  EXPECT_TRUE(client.Call({"GET", "k0"}).null);
  EXPECT_EQ(serve.StopWith(SIGTERM), 0);
}

// `prefixkv serve` is refused the directory `data`, which this process
// holds, and its log names this process.
void ExpectAServerIsKeptOutByThisProcess(const std::string& data) {
  testing::TempDir logs;
  const std::string server_log = logs.str() + "/serve.log";
  {
    testing::ServeProcess serve(data, {}, server_log);
    EXPECT_EQ(serve.port(), 0) << "prefixkv serve opened a directory being read";
  }
  std::ifstream in(server_log);
  const std::string said((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(
      said.find("in use by another process (pid " + std::to_string(::getpid()) + ")"),
      std::string::npos)
      << said;
}

// A killed server's directory in `data` (LeaveAKilledServersDirectory), and
// the options of a read-only tier of it.
SsdTierOptions AKilledServersDirectoryReadOnly(const std::string& data) {
  LeaveAKilledServersDirectory(data);
  SsdTierOptions options;
  options.path = data;
  options.read_only = true;
  options.log = [](std::string_view) {};
  return options;
}

// RocksDB's read-only mode takes no lock: a read-only open holds LOCK shared,
// so a server cannot open the directory under a reader (it names the
// reader), while other readers can.
TEST(AuditUsageTest, AReadOnlyOpenKeepsAServerOutAndLetsReadersIn) {
  testing::TempDir dir;
  const std::string data = dir.str() + "/data";
  const SsdTierOptions options = AKilledServersDirectoryReadOnly(data);
  StatusOr<std::unique_ptr<SsdTier>> reader = SsdTier::Open(options);
  ASSERT_OK(reader.status());
  EXPECT_EQ((*reader)->Totals().entries, 40u);
  StatusOr<std::unique_ptr<SsdTier>> another = SsdTier::Open(options);
  EXPECT_OK(another.status());
  CliRun run = RunCli("inspect --data-dir " + data);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  SsdTierOptions writer = options;
  writer.read_only = false;
  StatusOr<std::unique_ptr<SsdTier>> refused = SsdTier::Open(writer);
  EXPECT_TRUE(refused.status().IsBusy()) << refused.status().ToString();
  ExpectAServerIsKeptOutByThisProcess(data);
}

// A POSIX record lock belongs to the process, and closing any descriptor of
// the file drops all the process's locks on it: a second reader of the
// directory in one process, once closed, took the first reader's lock with
// it, and a server then opened the directory under the first reader; and a
// reader beside this process's writing tier turned the writer's lock into a
// shared one, and its close dropped it. Readers of one process now share one
// lock, released with the last; a reader beside a writer is refused.
TEST(AuditUsageTest, ASecondReaderInOneProcessKeepsTheDirectoryLocked) {
  testing::TempDir dir;
  const std::string data = dir.str() + "/data";
  const SsdTierOptions options = AKilledServersDirectoryReadOnly(data);
  {
    StatusOr<std::unique_ptr<SsdTier>> reader = SsdTier::Open(options);
    ASSERT_OK(reader.status());
    {
      StatusOr<std::unique_ptr<SsdTier>> another = SsdTier::Open(options);
      ASSERT_OK(another.status());
      ASSERT_OK((*another)->Close());
    }
    ExpectAServerIsKeptOutByThisProcess(data);
    EXPECT_EQ((*reader)->Totals().entries, 40u);
  }
  SsdTierOptions writing = options;
  writing.read_only = false;
  StatusOr<std::unique_ptr<SsdTier>> writer = SsdTier::Open(writing);
  ASSERT_OK(writer.status());
  StatusOr<std::unique_ptr<SsdTier>> beside = SsdTier::Open(options);
  EXPECT_TRUE(beside.status().IsBusy()) << beside.status().ToString();
  EXPECT_NE(beside.status().ToString().find("this process"), std::string::npos)
      << beside.status().ToString();
  beside = Status::Aborted("closed");  // a reader let in closes here
  ExpectAServerIsKeptOutByThisProcess(data);
  EXPECT_OK((*writer)->Close());
}

TEST(AuditUsageTest, UnknownFlagIsAUsageError) {
  EXPECT_EQ(RunCli("audit --frobnicate").exit_code, 2);
}

TEST(AuditUsageTest, HelpExplainsExitCodes) {
  CliRun run = RunCli("audit --help");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_NE(run.output.find("exit codes"), std::string::npos) << run.output;
}

// One row of the exit-code table: the arguments ({data}: a clean data
// directory, {missing}: a path that does not exist, {bad_trace}: a trace
// that is not JSON, {scratch}: a directory for commands that would write),
// the exit code, and what the output says: the error (in
// the JSON line with --json, else on stderr) or, on success, stdout.
struct CliCase {
  const char* args;
  int exit_code;
  const char* says;
};

constexpr CliCase kCliCases[] = {
    // 0: success.
    {"--version", 0, "prefixkv " PREFIXKV_VERSION_STRING "\n"},
    {"version", 0, "prefixkv " PREFIXKV_VERSION_STRING "\n"},
    {"--help", 0, "2  usage"},
    {"help audit", 0, "usage: prefixkv audit"},
    {"audit --json --data-dir {data}", 0, "\"ok\":true"},
    {"inspect --json --data-dir {data}", 0, "\"namespaces\""},
    // 1: the command ran on valid arguments and failed.
    {"replay {bad_trace}", 1, "InvalidArgument"},
    {"replay --json {bad_trace}", 1, "InvalidArgument"},
    {"advise --json {bad_trace} --hot-capacity-tokens 3M", 1, "InvalidArgument"},
    // 2: usage. Stray arguments, for every command.
    {"demo --data-dir {scratch} extra", 2, "unexpected argument 'extra'"},
    {"demo --json --data-dir {scratch} extra", 2, "unexpected argument 'extra'"},
    {"audit --json --data-dir {data} extra", 2, "unexpected argument 'extra'"},
    {"inspect --json extra", 2, "unexpected argument 'extra'"},
    {"repair extra", 2, "unexpected argument 'extra'"},
    {"serve --data-dir {scratch} --port 0 extra", 2, "unexpected argument 'extra'"},
    {"replay --json {bad_trace} extra", 2, "unexpected argument 'extra'"},
    {"advise --json {bad_trace} extra", 2, "unexpected argument 'extra'"},
    {"bench core --json extra", 2, "unexpected argument 'extra'"},
    {"--version extra", 2, "takes no arguments"},
    {"help audit extra", 2, "takes at most one argument"},
    {"help frobnicate", 2, "takes at most one argument"},
    // Unknown commands and flags, bad or missing values, missing arguments.
    {"", 2, "usage: prefixkv COMMAND"},
    {"frobnicate --json", 2, "unknown command 'frobnicate'"},
    {"demo --json --frobnicate", 2, "unknown flag --frobnicate"},
    {"inspect --frobnicate", 2, "unknown flag --frobnicate"},
    {"demo --json --turns 0", 2, "--turns must be 1..64, not '0'"},
    {"demo --json --nodes 3", 2, "--nodes must be 1 or 2, not '3'"},
    {"demo --json --model mamba", 2, "--model must be sliding or hybrid, not 'mamba'"},
    {"demo --json --model mamba --nodes 2", 2, "--model must be sliding or hybrid"},
    {"audit --json --data-dir", 2, "--data-dir needs a value"},
    {"serve --port six", 2, "--port"},
    {"route --nodes x --model m:16:float16:KVCache", 2, "--nodes: 'x' is not host:port"},
    {"route --nodes 127.0.0.1:1", 2, "give at least one --model"},
    {"route --nodes 127.0.0.1:1 --model m:16:float16:KVCache --bind ::1", 2,
     "--bind must be an IPv4 address, not '::1'"},
    {"route --nodes 127.0.0.1:1 --model m:0:float16:KVCache", 2,
     "block tokens must be 1..4194304"},
    // ROUTE names a model by name: a second --model of it was refused at
    // start, after the flags passed (exit 1).
    {"route --nodes 127.0.0.1:1 --model m:16:float16:KVCache --model "
     "m:32:float16:KVCache",
     2, "--model 'm' given twice"},
    // A node given twice was taken as two nodes: two feeds of one stream, and
    // its in-flight load split over two indices, so it took twice its share.
    // (--port 70000: before, the row failed on it instead of running.)
    {"route --nodes 127.0.0.1:1,127.0.0.1:01 --model m:16:float16:KVCache --port 70000",
     2, "--nodes: '127.0.0.1:01' is node 0 again"},
    {"bench frobnicate --json", 2, "unknown suite 'frobnicate'"},
    {"bench core --json --repeats 0", 2, "--repeats must be 1..1000, not '0'"},
    {"bench session --json --context abc", 2, "--context must be 1..65536, not 'abc'"},
    {"bench route --json --in-flight-per-node 0", 2,
     "--in-flight-per-node must be 1..1000000, not '0'"},
    {"replay --json", 2, "expected exactly one TRACE.jsonl"},
    {"advise --json --hot-capacity-tokens 3M", 2, "expected one TRACE.jsonl"},
    {"advise --json {bad_trace}", 2, "--hot-capacity-tokens must be at least one block"},
    {"advise --json {bad_trace} --hot-capacity-tokens 3M --max-keys 3", 2,
     "--max-keys must be 16..16777216, not '3'"},
    // `--svg "$OUT"` with OUT unset drew nothing, and said nothing (exit 0).
    // (The bench rows' later bad value ended them before.)
    {"advise --json {bad_trace} --hot-capacity-tokens 3M --svg ''", 2,
     "--svg must name a file"},
    {"bench policy --json --svg '' --repeats 0", 2, "--svg must name a file"},
    {"bench route --json --svg '' --in-flight-per-node 0", 2, "--svg must name a file"},
    {"bench scale --json --svg '' --seconds 0", 2, "--svg must name a file"},
    // A value out of its range is named, as a malformed one is.
    {"replay --json {bad_trace} --trace-block-tokens 0", 2,
     "--trace-block-tokens must be 1..4194304, not '0'"},
    {"replay --json {bad_trace} --advisor-max-keys abc", 2,
     "--advisor-max-keys must be 0..16777216, not 'abc'"},
    {"serve --advisor-half-life 5000000000", 2,
     "--advisor-half-life must be 0..4294967296 seconds, not '5000000000'"},
    {"route --nodes 127.0.0.1:1 --model m:16:float16:KVCache --xread-block-ms 0", 2,
     "--xread-block-ms must be 1..60000, not '0'"},
    // An SSD size below one block used to give no SSD point and exit 0.
    {"advise --json {bad_trace} --hot-capacity-tokens 3M --ssd-capacity-tokens 100", 2,
     "--ssd-capacity-tokens must be 0 or at least one block (512 tokens), not '100'"},
    {"serve --remote redis://127.0.0.1:1 --remote-write sometimes", 2,
     "--remote-write must be on_spill or always, not 'sometimes'"},
    // No TTL, no window: the quota was a lifetime cap, never reset. (The
    // later bad value ended the row before.)
    {"serve --remote redis://127.0.0.1:1 --remote-ttl 0 --remote-max-bytes 1M "
     "--remote-timeout-ms 0",
     2, "--remote-ttl 0 has none"},
    // An input path the user named that does not exist.
    {"audit --json --data-dir {missing}", 2, "does not exist"},
    {"inspect --json --data-dir {missing}", 2, "does not exist"},
    {"repair --data-dir {missing}", 2, "does not exist"},
    {"replay --json {missing}", 2, "cannot open trace"},
    {"advise --json {missing} --hot-capacity-tokens 3M", 2, "cannot open trace"},
    {"serve --requirepass-file {missing}", 2, "--requirepass-file: cannot read"},
    {"serve --admin-pass-file {missing}", 2, "--admin-pass-file: cannot read"},
};

std::string Expand(std::string text, const std::string& name, const std::string& value) {
  for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at))
    text.replace(at, name.size(), value);
  return text;
}

// Every command keeps the table; with --json a failure is exactly one line
// {"ok":false,"error":"..."} on stdout, without it nothing JSON-like.
TEST(CliExitCodes, EveryCommandKeepsTheTableAndReportsFailuresAsJson) {
  DataDirBuilder data(testing::TestSeed("CliExitCodes"));
  data.StoreChain();
  testing::TempDir tmp;
  const std::string bad_trace = tmp.str() + "/bad.jsonl";
  std::ofstream(bad_trace) << "this is not a trace\n";
  for (const CliCase& c : kCliCases) {
    std::string args = Expand(c.args, "{data}", data.dir());
    args = Expand(args, "{missing}", tmp.str() + "/missing");
    args = Expand(args, "{bad_trace}", bad_trace);
    args = Expand(args, "{scratch}", tmp.str() + "/scratch");
    SCOPED_TRACE("prefixkv " + args);
    const CliRun run = testing::RunCliSplit(args);
    EXPECT_EQ(run.exit_code, c.exit_code) << run.output << run.errors;
    if (c.exit_code == 0) {
      EXPECT_NE(run.output.find(c.says), std::string::npos) << run.output;
      continue;
    }
    const std::string prefix = "{\"ok\":false,\"error\":\"";
    if (args.find("--json") == std::string::npos) {
      EXPECT_EQ(run.output.find(prefix), std::string::npos) << run.output;
      EXPECT_NE(run.errors.find(c.says), std::string::npos) << run.errors;
      continue;
    }
    if (run.output.rfind(prefix, 0) != 0) {
      ADD_FAILURE() << "no JSON error line first on stdout: " << run.output;
      continue;  // the next rows still run
    }
    EXPECT_EQ(run.output.find('\n'), run.output.size() - 1) << run.output;
    EXPECT_EQ(run.output.substr(run.output.size() - 3), "\"}\n") << run.output;
    EXPECT_NE(run.output.find(c.says), std::string::npos) << run.output;
  }
}

// An empty password, from --requirepass, --admin-pass or their environment
// variables (`--requirepass "$PASS"` with PASS unset), is a usage error, as an
// empty password file is: serve took it as no password and served every
// client without AUTH. `timeout` ends a serve that starts anyway.
TEST(CliExitCodes, AnEmptyPasswordIsAUsageError) {
  testing::TempDir tmp;
  const std::string serve = "serve --port 0 --data-dir " + tmp.str() + "/data ";
  const std::string bounded = std::string("timeout 5 ") + PREFIXKV_CLI;
  for (const auto& [env, args] :
       std::vector<std::pair<std::string, std::string>>{{"", "--requirepass ''"},
                                                        {"", "--admin-pass ''"},
                                                        {"PREFIXKV_REQUIREPASS=", ""},
                                                        {"PREFIXKV_ADMIN_PASS=", ""}}) {
    SCOPED_TRACE(env + " prefixkv " + serve + args);
    const CliRun run =
        testing::RunCliWith(serve + args, "2>&1", "env " + env + " " + bounded);
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_NE(run.output.find("empty"), std::string::npos) << run.output;
    EXPECT_EQ(run.output.find("listening on"), std::string::npos) << run.output;
  }
}

// The demo wipes <D>/demo at start: `--data-dir "$DIR"` with DIR unset wiped
// the working directory's demo/, which the demo never made. An empty
// --data-dir is a usage error, and that demo/ keeps its files.
TEST(CliExitCodes, DemoWithAnEmptyDataDirWipesNothing) {
  testing::TempDir cwd;
  fs::create_directories(cwd.str() + "/demo");
  std::ofstream(cwd.str() + "/demo/keep") << "the user's file\n";
  const CliRun run = testing::RunCliWith("demo --json --turns 1 --data-dir ''", "2>&1",
                                         "cd " + cwd.str() + " && " + PREFIXKV_CLI);
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--data-dir must name a directory"), std::string::npos)
      << run.output;
  EXPECT_TRUE(fs::exists(cwd.str() + "/demo/keep")) << run.output;
}

// A command's --help promises a JSON failure line only when it takes --json:
// repair's and serve's said "with --json a failure prints ..." and refused
// --json as an unknown flag (route takes none either, architecture.md).
TEST(CliExitCodes, HelpPromisesAJsonFailureOnlyWhereThereIsJson) {
  const std::string promise = "with --json a failure prints";
  for (const char* command : {"repair", "serve", "route"}) {
    SCOPED_TRACE(command);
    const CliRun run = testing::RunCliSplit(std::string(command) + " --help");
    EXPECT_EQ(run.exit_code, 0) << run.errors;
    EXPECT_NE(run.output.find("exit codes:"), std::string::npos) << run.output;
    EXPECT_EQ(run.output.find(promise), std::string::npos) << run.output;
    EXPECT_EQ(testing::RunCliSplit(std::string(command) + " --json").exit_code, 2);
  }
  const CliRun audit = testing::RunCliSplit("audit --help");
  EXPECT_NE(audit.output.find(promise), std::string::npos) << audit.output;
  const CliRun top = testing::RunCliSplit("--help");
  EXPECT_EQ(top.output.find(promise), std::string::npos) << top.output;
  EXPECT_NE(top.output.find("with --json (a command that takes it) a failure prints"),
            std::string::npos)
      << top.output;
}

// A report that never reached its file (stdout on a full disk: /dev/full)
// is a failure: every command exited 0, with an empty or cut report.
TEST(CliExitCodes, OutputThatCannotBeWrittenIsAFailure) {
  DataDirBuilder data(testing::TestSeed("CliExitCodesFullDisk"));
  data.StoreChain();
  for (const std::string& args :
       {std::string("--version"), std::string("help audit"),
        "audit --json --data-dir " + data.dir(), "inspect --data-dir " + data.dir()}) {
    // stderr to the pipe, stdout to the full device.
    CliRun run = testing::RunCliWith(args, "2>&1 >/dev/full");
    EXPECT_EQ(run.exit_code, 1) << args << ": " << run.output;
    EXPECT_NE(run.output.find("prefixkv: the output could not be written to stdout"),
              std::string::npos)
        << args << ": " << run.output;
  }
}

}  // namespace
}  // namespace prefixkv
