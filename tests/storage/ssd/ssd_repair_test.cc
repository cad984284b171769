// Issue 14, points 4 and 5: one flipped byte in the metadata database (the
// RocksDB log, a table, the MANIFEST or CURRENT) must not silently drop
// blocks whose payloads are intact in the segment files. The damaged
// database is detected at Open and rebuilt from the segments' own records;
// a removed or overwritten block never comes back from an old extent (the
// removal journal), and no wrong byte is ever served.
//
// One data directory is prepared once (a child process writes, closes,
// reopens, writes more, overwrites and removes some, then dies without
// Close: a kill -9, so the log holds the second half); every flip works on a
// fresh copy of it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <optional>
#include <random>

#include "prefixkv/advanced/ssd_tier.h"
#include "tests/storage/ssd/ssd_test_util.h"
#include "tests/support/fault_injection_file_system.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

namespace fs = std::filesystem;
using testing::ChainBlock;

constexpr uint64_t kChains = 100, kPerChain = 20;  // 2,000 blocks

SharedBytes PayloadOf(const BlockKey& k, uint64_t version) {
  return testing::ConformancePayload(k, version, 200 + (k.lo * 7919 + k.hi) % 1500);
}

// key -> expected version (nullopt: removed, must never be served).
using Model = std::map<BlockKey, std::optional<uint64_t>>;

SsdTierOptions Options(const std::string& path) {
  SsdTierOptions o = testing::TestSsdOptions(path);
  o.durability = SsdDurability::kWal;
  o.use_direct_io = false;  // the 80 copies are read from the page cache: short
  return o;
}

// Writes the directory in a child that dies without Close. Returns the model.
Model PrepareKilledDir(const std::string& path) {
  Model model;
  for (uint64_t c = 0; c < kChains; ++c) {
    for (uint64_t i = 0; i < kPerChain; ++i) model[ChainBlock(c, i).key] = 0;
  }
  // Overwritten (version 1) and removed blocks, in both halves.
  for (uint64_t c = 0; c < kChains; c += 10) {
    model[ChainBlock(c, kPerChain - 1).key] = 1;
    model[ChainBlock(c + 1, kPerChain - 1).key] = std::nullopt;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    auto write = [&](uint64_t from, uint64_t to) {
      auto tier = SsdTier::Open(Options(path));
      if (!tier.ok()) _exit(2);
      for (uint64_t c = from; c < to; ++c) {
        for (uint64_t i = 0; i < kPerChain; ++i) {
          const BlockMeta m = ChainBlock(c, i);
          if (!(*tier)->Put(m, PayloadOf(m.key, 0), false).ok()) _exit(3);
        }
      }
      for (uint64_t c = from; c < to; c += 10) {
        const BlockMeta m = ChainBlock(c, kPerChain - 1);
        if (!(*tier)->Put(m, PayloadOf(m.key, 1), false).ok()) _exit(4);
        if (!(*tier)->Remove(ChainBlock(c + 1, kPerChain - 1).key).ok()) _exit(5);
      }
      return std::move(tier).value();
    };
    // First half: closed cleanly (tables); second half: in the log only.
    if (!write(0, kChains / 2)->Close().ok()) _exit(6);
    auto tier = write(kChains / 2, kChains);
    _exit(0);  // no Close: like kill -9
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  return model;
}

// The prepared directory, made once per process: the child is forked before
// this process has started any tier (and so any thread of its own).
const fs::path& PreparedDir(Model* model) {
  static const testing::TempDir dir;  // removed at exit
  static const fs::path base = dir.path() / "base";
  static const Model prepared = PrepareKilledDir(base.string());
  if (model != nullptr) *model = prepared;
  return base;
}

struct Tally {
  uint64_t flips = 0, rebuilt = 0, served = 0, expected = 0, wrong = 0, stale = 0;
};

// Opens the damaged copy, reads every block of the model.
void Check(const std::string& path, const Model& model, Tally* t) {
  testing::LogLines log;
  SsdTierOptions o = Options(path);
  o.log = log.Sink();
  auto tier = testing::OpenSsd(o);
  ASSERT_NE(tier, nullptr);
  if (!tier->open_report().metadata_damage.empty()) {
    ++t->rebuilt;
    EXPECT_EQ(log.Count("rebuilt from"), 1) << "the rebuild is stated in the log";
  }
  for (const auto& [key, version] : model) {
    StatusOr<SharedBytes> got = tier->Get(key);
    if (!version) {
      if (got.ok()) ++t->stale;
      continue;
    }
    ++t->expected;
    if (!got.ok()) continue;
    if (got->view() == PayloadOf(key, *version).view()) {
      ++t->served;
    } else {
      ++t->wrong;
      if (*version > 0 && got->view() == PayloadOf(key, 0).view()) ++t->stale;
    }
  }
  testing::ExpectCountersMatchContents(*tier, {0});
}

std::vector<fs::path> Matching(const fs::path& dir, const std::string& pattern) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.find(pattern) != std::string::npos &&
        fs::file_size(e.path()) > 0)
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(SsdRepair, OneFlippedMetadataByteLosesNoProvableBlock) {
  testing::TempDir dir;
  Model model;
  const fs::path& base = PreparedDir(&model);
  const uint64_t per_kind =
      testing::Iterations(20, 80);  // the issue asks for 20 per kind
  for (const std::string kind : {".log", ".sst", "MANIFEST-", "CURRENT"}) {
    const std::vector<fs::path> files = Matching(base, kind);
    ASSERT_FALSE(files.empty()) << "the prepared directory has no " << kind << " file";
    Tally t;
    for (uint64_t k = 0; k < per_kind; ++k) {
      const fs::path& file = files[k % files.size()];
      const fs::path work = dir.path() / "work";
      fs::remove_all(work);
      fs::copy(base, work, fs::copy_options::recursive);
      const uint64_t size = fs::file_size(file);
      testing::XorByteAt(work / file.filename(), size * (2 * k + 1) / (2 * per_kind),
                         static_cast<char>(0x01 << (k % 8)));
      ++t.flips;
      Check(work.string(), model, &t);
    }
    testing::PrintCounters("[repair " + kind + "]", {{"flips", t.flips},
                                                     {"rebuilt", t.rebuilt},
                                                     {"blocks_expected", t.expected},
                                                     {"served", t.served},
                                                     {"wrong", t.wrong},
                                                     {"stale", t.stale}});
    EXPECT_EQ(t.wrong, 0u) << kind;
    EXPECT_EQ(t.stale, 0u) << kind << ": a removed or overwritten block came back";
    EXPECT_GE(t.served * 100, t.expected * 99) << kind << ": blocks lost";
  }
}

TEST(SsdRepair, WithRepairOffADamagedDatabaseIsAnErrorAndNothingMoves) {
  testing::TempDir dir;
  const fs::path base = dir.path() / "base";
  fs::copy(PreparedDir(nullptr), base, fs::copy_options::recursive);
  const std::vector<fs::path> logs = Matching(base, ".log");
  ASSERT_FALSE(logs.empty());
  testing::XorByteAt(logs[0], fs::file_size(logs[0]) / 2, 0x10);
  // The database's files and the segments (the full-disk reserve file is
  // not the database's: Open releases and rewrites it).
  auto listing = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(base)) {
      if (e.path().filename() != "space-reserve") names.push_back(e.path().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  const std::vector<std::string> before = listing();
  SsdTierOptions o = Options(base.string());
  o.repair_damaged_metadata = false;
  StatusOr<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o);
  EXPECT_FALSE(tier.ok()) << "a damaged log in the middle must be detected";
  EXPECT_EQ(before, listing()) << "nothing is moved or rebuilt";
}

}  // namespace
}  // namespace prefixkv

namespace prefixkv {
namespace {

// A compaction moves a segment's last committed block elsewhere; a crash
// before the emptied segment is unlinked leaves it beside metadata that
// references the block at its new place. That is no rollback: the commit
// record names the key and bytes, which the metadata knows (a commit record
// naming only the location took it for one, and audit failed).
TEST(SsdRepair, ACompactionMoveBeforeACrashIsNoRollback) {
  testing::TempDir dir;
  const fs::path path = dir.path() / "ssd";
  SsdTierOptions o = Options(path.string());
  o.capacity_bytes = 64 << 20;
  o.segment_bytes = 64 << 10;  // 8 extents of 8 KiB
  auto payload = [](const BlockKey& k) {
    return testing::ConformancePayload(k, 0, 6000);  // extents of 8 KiB
  };
  fs::path kept_copy;
  {
    auto tier = testing::OpenSsd(o);
    ASSERT_NE(tier, nullptr);
    for (uint64_t i = 0; i < 9; ++i) {
      ASSERT_OK(tier->Put(ChainBlock(i, 0), payload(ChainBlock(i, 0).key), false));
    }
    // The first segment is sealed and never written again: copied now, before
    // the removals wake the background reclaimer, which may unlink it at once.
    fs::path first;
    for (const auto& e : fs::directory_iterator(path / "segments")) {
      if (e.path().extension() == ".seg" && (first.empty() || e.path() < first)) {
        first = e.path();
      }
    }
    ASSERT_FALSE(first.empty());
    kept_copy = dir.path() / "copy.seg";
    fs::copy_file(first, kept_copy);
    for (uint64_t i = 0; i < 6; ++i) ASSERT_OK(tier->Remove(ChainBlock(i, 0).key));
    ASSERT_OK(tier->Compact());  // moves blocks 6 and 7, unlinks the first segment
    ASSERT_FALSE(fs::exists(first)) << "the sparse segment was not compacted";
    ASSERT_OK(tier->Close());
    fs::copy_file(kept_copy, first);  // as if the process died before the unlink
  }
  SsdTierOptions audit = o;
  audit.repair_damaged_metadata = false;
  StatusOr<std::unique_ptr<SsdTier>> tier = SsdTier::Open(audit);
  ASSERT_OK(tier);
  EXPECT_EQ((*tier)->open_report().metadata_rollback, "");
  for (uint64_t i = 6; i < 9; ++i) {
    StatusOr<SharedBytes> got = (*tier)->Get(ChainBlock(i, 0).key);
    ASSERT_OK(got);
    EXPECT_EQ(got->view(), payload(ChainBlock(i, 0).key).view());
  }
}

// A directory whose journal is gone (from before the journal existed, or
// lost): audit-mode opens report it and write nothing; an open that repairs
// regenerates it from the intact metadata, so a later rebuild proves every
// block again (issue 24: it used to put every existing segment under the
// barrier, and a later rebuild restored 0 of 1,900 blocks).
TEST(SsdRepair, AMissingJournalIsRegeneratedSoALaterRebuildRestoresEveryBlock) {
  testing::TempDir dir;
  const fs::path path = dir.path() / "ssd";
  const BlockMeta old_block = ChainBlock(0, 0), new_block = ChainBlock(1, 0);
  const BlockMeta gone = ChainBlock(2, 0);
  {
    auto tier = testing::OpenSsd(Options(path.string()));
    ASSERT_OK(tier->Put(old_block, PayloadOf(old_block.key, 0), false));
    ASSERT_OK(tier->Put(gone, PayloadOf(gone.key, 0), false));
    ASSERT_OK(tier->Remove(gone.key));  // its extent stays in the segment
    ASSERT_OK(tier->Close());
  }
  fs::remove(path / "segments" / "removals.pkvj");
  {
    SsdTierOptions o = Options(path.string());
    o.repair_damaged_metadata = false;
    auto tier = testing::OpenSsd(o);
    ASSERT_NE(tier, nullptr);
    EXPECT_NE(tier->open_report().journal_problem, "");
    EXPECT_FALSE(tier->open_report().journal_regenerated);
    ASSERT_OK(tier->Close());
    EXPECT_FALSE(fs::exists(path / "segments" / "removals.pkvj"));
  }
  {
    auto tier = testing::OpenSsd(Options(path.string()));
    ASSERT_NE(tier, nullptr);
    EXPECT_TRUE(tier->open_report().metadata_damage.empty());
    EXPECT_NE(tier->open_report().journal_problem, "");
    EXPECT_TRUE(tier->open_report().journal_regenerated);
    EXPECT_EQ(tier->open_report().journal_regenerated_removals, 1u);  // `gone`
    EXPECT_OK(tier->Get(old_block.key));
    EXPECT_TRUE(fs::exists(path / "segments" / "removals.pkvj"));
    ASSERT_OK(tier->Put(new_block, PayloadOf(new_block.key, 0), false));
    ASSERT_OK(tier->Close());
  }
  {
    auto tier = testing::OpenSsd(Options(path.string()));
    EXPECT_EQ(tier->open_report().journal_problem, "");
    ASSERT_OK(tier->Close());
  }
  for (const fs::path& m : Matching(path, "MANIFEST-")) {
    testing::XorByteAt(m, fs::file_size(m) / 2, 0x08);
  }
  auto tier = testing::OpenSsd(Options(path.string()));
  ASSERT_NE(tier, nullptr);
  const SsdOpenReport& r = tier->open_report();
  ASSERT_FALSE(r.metadata_damage.empty());
  EXPECT_EQ(r.rebuilt_blocks, 2u);
  EXPECT_EQ(r.rebuild_unprovable, 1u);  // the removed one stays removed
  EXPECT_TRUE(tier->Get(gone.key).status().IsNotFound());
  for (const BlockMeta& b : {old_block, new_block}) {
    StatusOr<SharedBytes> got = tier->Get(b.key);
    ASSERT_OK(got);
    EXPECT_EQ(got->view(), PayloadOf(b.key, 0).view());
  }
}

// Copies the regular files of `from` (the metadata database, not segments/)
// into `to`, replacing what is there.
void CopyMetadataFiles(const fs::path& from, const fs::path& to) {
  for (const auto& e : fs::directory_iterator(to)) {
    if (e.is_regular_file() && e.path().filename() != "LOCK") fs::remove(e.path());
  }
  for (const auto& e : fs::directory_iterator(from)) {
    if (e.is_regular_file()) {
      fs::copy_file(e.path(), to / e.path().filename(),
                    fs::copy_options::overwrite_existing);
    }
  }
}

// A model check of rebuild and roll-forward: random stores (three versions
// per key, so a key is often stored again with bytes it had before, also
// after a removal), removals, compactions and reopens (each rewrites the
// journal), then (a) every metadata file deleted: a rebuild from the
// segments, (b) the metadata put back as the last open found it (every
// write since lost, as with a lost log): a roll-forward. Either must give
// exactly the model: every live key with its last bytes, no removed key.
// Until 2026-12-06 a key removed and stored again with its old bytes was
// lost by both, and a removed key could come back from a garbage copy of
// its bytes (a same-bytes store journaled nothing).
// `power_cuts`: sync mode on a FaultInjectionFileSystem, and 3% of the
// operations are a power cut (every unsynced byte and name dropped, the
// background reclaimer possibly mid-compaction) and a reopen; sync mode
// loses nothing acknowledged, so the model stays as it is.
void RandomRepairModelCheck(const char* name, bool power_cuts) {
  const uint64_t seed = testing::TestSeed(name);
  std::mt19937_64 rng(seed);
  const uint64_t rounds = testing::Iterations(power_cuts ? 3 : 4, 40);
  for (uint64_t round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round) +
                 ", PREFIXKV_SEED=" + std::to_string(seed));
    testing::TempDir dir;
    const fs::path path = dir.path() / "ssd";
    FaultInjectionFileSystem faults;
    SsdTierOptions o = Options(path.string());
    if (power_cuts) {
      o.durability = SsdDurability::kSync;
      o.file_system = &faults;
    }
    o.segment_bytes = 64 << 10;  // 8 extents of 8 KiB: compactions move blocks
    auto payload = [](uint64_t key, uint64_t version) {
      return testing::ConformancePayload(ChainBlock(key, 0).key, version, 6000);
    };
    std::map<uint64_t, uint64_t> model;       // key -> live version
    std::map<uint64_t, std::string> history;  // key -> its operations, for a failure
    std::string global;                       // compactions and reopens
    const fs::path snapshot = dir.path() / "snapshot";
    bool snapshotted = false;
    auto tier = testing::OpenSsd(o);
    ASSERT_NE(tier, nullptr);
    for (int op = 0; op < 300; ++op) {
      const uint64_t key = rng() % 12, r = rng() % 100;
      if (r < 55) {
        const uint64_t version = rng() % 3;
        ASSERT_OK(tier->Put(ChainBlock(key, 0), payload(key, version), false));
        model[key] = version;
        history[key] += " " + std::to_string(op) + ":put" + std::to_string(version);
      } else if (r < 85) {
        const Status s = tier->Remove(ChainBlock(key, 0).key);
        ASSERT_TRUE(s.ok() || s.IsNotFound()) << s.ToString();
        model.erase(key);
        history[key] += " " + std::to_string(op) + ":remove";
      } else if (r < 93) {
        ASSERT_OK(tier->Compact());
        global += " " + std::to_string(op) + ":compact";
      } else {
        if (power_cuts && r < 96) {
          ASSERT_OK(faults.SimulatePowerLoss().status());
          EXPECT_FALSE(tier->Close().ok());
          tier.reset();
          faults.PowerOn();
          global += " " + std::to_string(op) + ":power-cut";
        } else {
          ASSERT_OK(tier->Close());
          tier.reset();
        }
        {  // the metadata as this open will find it: the log since is lost
          fs::remove_all(snapshot);
          fs::create_directory(snapshot);
          CopyMetadataFiles(path, snapshot);
          snapshotted = true;
          global += " " + std::to_string(op) + ":copy";
        }
        global += " " + std::to_string(op) + ":reopen";
        tier = testing::OpenSsd(o);
        ASSERT_NE(tier, nullptr);
      }
    }
    ASSERT_OK(tier->Close());
    tier.reset();
    auto expect_model = [&](const char* how) {
      SCOPED_TRACE(how);
      tier = testing::OpenSsd(o);
      ASSERT_NE(tier, nullptr);
      for (uint64_t key = 0; key < 12; ++key) {
        StatusOr<SharedBytes> got = tier->Get(ChainBlock(key, 0).key);
        const std::string ops = "; its operations:" + history[key] + "; others:" + global;
        if (auto m = model.find(key); m != model.end()) {
          EXPECT_OK(got) << "key " << key << " lost" << ops;
          EXPECT_TRUE(!got.ok() || got->view() == payload(key, m->second).view())
              << "key " << key << " served other bytes" << ops;
        } else {
          std::string which = "unknown bytes";
          for (uint64_t v = 0; got.ok() && v < 3; ++v) {
            if (got->view() == payload(key, v).view())
              which = "version " + std::to_string(v);
          }
          EXPECT_FALSE(got.ok())
              << "removed key " << key << " back (" << which << ")" << ops;
        }
      }
      EXPECT_OK(tier->Close());
      tier.reset();
    };
    const fs::path copy = dir.path() / "copy";
    fs::copy(path, copy, fs::copy_options::recursive);
    testing::DropMetadata(path);
    expect_model("rebuilt from the segments");
    if (snapshotted) {
      fs::remove_all(path);
      fs::rename(copy, path);
      CopyMetadataFiles(snapshot, path);
      expect_model("rolled forward from the metadata of the last open");
    }
    if (::testing::Test::HasFailure()) return;
  }
}

// A segment whose tail is gone (a power cut in wal mode can leave the file
// shorter than its appends, and the metadata log's tail lost with it) beside
// metadata that lacks the blocks of that tail: `how` is "lost log" (the
// metadata as the last open found it: rolled forward) or "metadata gone"
// (rebuilt). The journal's commit records of the vanished extents named
// places no walk could find again, so every later open took the metadata for
// older than the segments: `prefixkv audit` failed (exit 1) and `prefixkv
// repair` rolled it "forward" (nothing restored) at every run, for ever.
void ExpectATornSegmentTailIsRepairedOnce(const std::string& how) {
  SCOPED_TRACE(how);
  testing::TempDir dir;
  const fs::path path = dir.path() / "ssd";
  const SsdTierOptions o = Options(path.string());
  auto payload = [](uint64_t i) {  // extents of 8 KiB
    return testing::ConformancePayload(ChainBlock(i, 0).key, 0, 6000);
  };
  auto store = [&](uint64_t from, uint64_t to) {
    auto tier = testing::OpenSsd(o);
    ASSERT_NE(tier, nullptr);
    for (uint64_t i = from; i < to; ++i) {
      ASSERT_OK(tier->Put(ChainBlock(i, 0), payload(i), false));
    }
    ASSERT_OK(tier->Close());
  };
  store(0, 4);
  const fs::path snapshot = dir.path() / "snapshot";
  fs::create_directory(snapshot);
  CopyMetadataFiles(path, snapshot);
  store(4, 8);  // a new segment: a restart seals the others
  const fs::path last = testing::SegmentFiles(path).back();
  fs::resize_file(last, 2 * 8192);  // blocks 6 and 7 are gone
  if (how == "lost log") {
    CopyMetadataFiles(snapshot, path);
  } else {
    testing::DropMetadata(path);
  }
  {
    auto tier = testing::OpenSsd(o);
    ASSERT_NE(tier, nullptr);
    const SsdOpenReport& r = tier->open_report();
    EXPECT_NE(r.metadata_rollback + r.metadata_damage, "") << "the damage is repaired";
    for (uint64_t i = 0; i < 8; ++i) {
      StatusOr<SharedBytes> got = tier->Get(ChainBlock(i, 0).key);
      if (i >= 6) {
        EXPECT_TRUE(got.status().IsNotFound()) << "block " << i;
        continue;
      }
      ASSERT_OK(got) << "block " << i;
      EXPECT_EQ(got->view(), payload(i).view()) << "block " << i;
    }
    ASSERT_OK(tier->Close());
  }
  SsdTierOptions report_only = o;
  report_only.repair_damaged_metadata = false;
  StatusOr<std::unique_ptr<SsdTier>> audited = SsdTier::Open(report_only);
  ASSERT_OK(audited) << "an audit after the repair";
  EXPECT_EQ((*audited)->open_report().metadata_rollback, "");
  ASSERT_OK((*audited)->Close());
  auto again = testing::OpenSsd(o);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->open_report().metadata_rollback, "") << "a second repair";
  EXPECT_EQ(again->open_report().metadata_damage, "");
}

TEST(SsdRepair, ATornSegmentTailBesideALostLogIsRolledForwardOnce) {
  ExpectATornSegmentTailIsRepairedOnce("lost log");
}

TEST(SsdRepair, ATornSegmentTailBesideLostMetadataIsRebuiltOnce) {
  ExpectATornSegmentTailIsRepairedOnce("metadata gone");
}

TEST(SsdRepair, RandomStoresRemovalsAndCompactionsAreRebuiltAndRolledForwardExactly) {
  RandomRepairModelCheck("SsdRepair.RandomStoresRemovals", /*power_cuts=*/false);
}

// The same with power cuts (sync mode). Written 2026-12-06 with the
// journal's reconciliation at open.
TEST(SsdRepair, RandomStoresRemovalsCompactionsAndPowerCutsAreRebuiltExactly) {
  RandomRepairModelCheck("SsdRepair.RandomPowerCuts", /*power_cuts=*/true);
}

}  // namespace
}  // namespace prefixkv
