// FaultInjectionFileSystem: injected faults, and a simulated power loss that
// leaves exactly what was made durable (file syncs for contents, directory
// syncs for new names).
#include "tests/support/fault_injection_file_system.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::TempDir;

// The file's content through the plain POSIX file system; "<absent>" if none.
std::string Content(const std::string& path) {
  StatusOr<std::unique_ptr<FileHandle>> f =
      FileSystem::Default()->OpenFile(path, {.mode = OpenMode::kRead});
  if (!f.ok()) return "<absent>";
  std::string s(1 << 16, '\0');
  s.resize((*f)->Read(0, s.size(), s.data()).value());
  return s;
}

class FaultInjectionFsTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) { return dir_.str() + "/" + name; }
  std::unique_ptr<FileHandle> Create(const std::string& name) {
    StatusOr<std::unique_ptr<FileHandle>> f =
        fs_.OpenFile(Path(name), {.mode = OpenMode::kCreateNew});
    EXPECT_OK(f);
    return f.ok() ? std::move(f).value() : nullptr;
  }
  void PowerCycle() {
    ASSERT_OK(fs_.SimulatePowerLoss().status());
    fs_.PowerOn();
  }

  TempDir dir_;
  FaultInjectionFileSystem fs_;
};

TEST_F(FaultInjectionFsTest, PowerLossKeepsSyncedBytesAndDropsTheRest) {
  auto f = Create("f");
  ASSERT_OK(fs_.SyncDir(dir_.str()));  // the name is durable
  ASSERT_OK(f->Write(0, std::string(5000, 'a').data(), 5000));
  ASSERT_OK(f->DataSync());
  ASSERT_OK(f->Write(5000, std::string(3000, 'b').data(), 3000));  // unsynced tail
  ASSERT_OK(f->Write(100, "XYZ", 3));                              // unsynced overwrite
  ASSERT_OK_AND_ASSIGN(PowerLossReport report, fs_.SimulatePowerLoss());
  EXPECT_EQ(Content(Path("f")), std::string(5000, 'a'));
  EXPECT_EQ(report.files_rolled_back, 1u);
  EXPECT_GE(report.bytes_dropped, 3000u);
}

TEST_F(FaultInjectionFsTest, AFileWhoseNameWasNeverSyncedVanishes) {
  auto synced = Create("synced");
  auto unsynced = Create("unsynced");
  ASSERT_OK(synced->Write(0, "1", 1));
  ASSERT_OK(synced->DataSync());
  ASSERT_OK(fs_.SyncDir(dir_.str()));
  auto late = Create("late");  // after the directory sync
  ASSERT_OK(late->Write(0, "2", 1));
  ASSERT_OK(late->DataSync());  // its bytes, not its name
  PowerCycle();
  EXPECT_EQ(Content(Path("synced")), "1");
  EXPECT_EQ(Content(Path("unsynced")), "");  // name synced, content never was
  EXPECT_EQ(Content(Path("late")), "<absent>");
}

TEST_F(FaultInjectionFsTest, AnUnsyncedRenameOverAFileRestoresTheReplacedContent) {
  {
    auto f = Create("CURRENT");
    ASSERT_OK(f->Write(0, "old", 3));
    ASSERT_OK(f->Sync());
  }
  ASSERT_OK(fs_.SyncDir(dir_.str()));
  {
    auto t = Create("CURRENT.tmp");
    ASSERT_OK(t->Write(0, "new", 3));
    ASSERT_OK(t->Sync());
  }
  ASSERT_OK(fs_.RenameFile(Path("CURRENT.tmp"), Path("CURRENT")));
  EXPECT_EQ(Content(Path("CURRENT")), "new");
  PowerCycle();
  EXPECT_EQ(Content(Path("CURRENT")), "old");
  EXPECT_EQ(Content(Path("CURRENT.tmp")), "<absent>");
  // With the directory synced after the rename, the new content stays.
  {
    auto t = Create("CURRENT.tmp");
    ASSERT_OK(t->Write(0, "new", 3));
    ASSERT_OK(t->Sync());
  }
  ASSERT_OK(fs_.RenameFile(Path("CURRENT.tmp"), Path("CURRENT")));
  ASSERT_OK(fs_.SyncDir(dir_.str()));
  PowerCycle();
  EXPECT_EQ(Content(Path("CURRENT")), "new");
}

TEST_F(FaultInjectionFsTest, UnlinksAreDurableAtOnceOrOnlyOnceTheirDirectoryIsSynced) {
  // "gone": "synced" on the device, "+unsynced" after it in the cache only.
  const auto create_gone = [&] {
    auto f = Create("gone");
    ASSERT_OK(f->Write(0, "synced", 6));
    ASSERT_OK(f->DataSync());
    ASSERT_OK(f->Write(6, "+unsynced", 9));
  };
  create_gone();
  auto never = Create("never");  // a name never synced
  ASSERT_OK(fs_.SyncDir(dir_.str()));
  ASSERT_OK(fs_.DeleteFile(Path("gone")));
  PowerCycle();
  EXPECT_EQ(Content(Path("gone")), "<absent>") << "durable at once by default";
  create_gone();
  auto later = Create("later");
  ASSERT_OK(fs_.SyncDir(dir_.str()));
  fs_.KeepUnlinksUntilDirSync(true);
  ASSERT_OK(fs_.DeleteFile(Path("gone")));
  ASSERT_OK(fs_.DeleteFile(Path("later")));
  auto unsynced = Create("unsynced");
  ASSERT_OK(fs_.DeleteFile(Path("unsynced")));
  PowerCycle();
  EXPECT_EQ(Content(Path("gone")), "synced") << "back as last synced";
  EXPECT_EQ(Content(Path("later")), "");
  EXPECT_EQ(Content(Path("unsynced")), "<absent>") << "its name was never durable";
  ASSERT_OK(fs_.DeleteFile(Path("gone")));
  ASSERT_OK(fs_.SyncDir(dir_.str()));
  PowerCycle();
  EXPECT_EQ(Content(Path("gone")), "<absent>") << "durable with its directory";
}

TEST_F(FaultInjectionFsTest, TruncatingSyncedBytesIsUndoneToo) {
  auto f = Create("f");
  ASSERT_OK(fs_.SyncDir(dir_.str()));
  ASSERT_OK(f->Write(0, std::string(9000, 'q').data(), 9000));
  ASSERT_OK(f->Sync());
  ASSERT_OK(f->Truncate(10));
  ASSERT_OK(f->Write(10, "zz", 2));
  PowerCycle();
  EXPECT_EQ(Content(Path("f")), std::string(9000, 'q'));
}

TEST_F(FaultInjectionFsTest, NothingWorksWhileThePowerIsOffAndOldHandlesStayDead) {
  auto f = Create("f");
  ASSERT_OK(fs_.SimulatePowerLoss().status());
  EXPECT_TRUE(f->Write(0, "x", 1).IsIOError());
  EXPECT_TRUE(f->DataSync().IsIOError());
  char c;
  EXPECT_TRUE(f->Read(0, 1, &c).status().IsIOError());
  EXPECT_TRUE(
      fs_.OpenFile(Path("g"), {.mode = OpenMode::kCreateNew}).status().IsIOError());
  EXPECT_TRUE(fs_.ListDir(dir_.str()).status().IsIOError());
  fs_.PowerOn();
  EXPECT_TRUE(f->Write(0, "x", 1).IsIOError()) << "opened before the loss";
  auto g = Create("g");
  ASSERT_NE(g, nullptr);
  EXPECT_OK(g->Write(0, "x", 1));
}

TEST_F(FaultInjectionFsTest, ReadErrorsHitChosenFilesAfterNReads) {
  auto a = Create("a.seg");
  auto b = Create("b.log");
  ASSERT_OK(a->Write(0, "aaaa", 4));
  ASSERT_OK(b->Write(0, "bbbb", 4));
  fs_.AddFault({.op = FaultOp::kRead, .path_contains = ".seg", .skip = 2, .count = 1});
  char buf[4];
  EXPECT_OK(a->Read(0, 4, buf));
  EXPECT_OK(a->Read(0, 4, buf));
  EXPECT_TRUE(a->Read(0, 4, buf).status().IsIOError());  // the third
  EXPECT_OK(a->Read(0, 4, buf));                         // spent
  EXPECT_OK(b->Read(0, 4, buf));                         // other files never
  EXPECT_EQ(fs_.faults_injected(), 1u);
}

TEST_F(FaultInjectionFsTest, WriteErrorsShortWritesAndSyncFailures) {
  auto f = Create("f");
  fs_.AddFault({.op = FaultOp::kWrite, .count = 1, .error = Status::NoSpace("ENOSPC")});
  EXPECT_TRUE(f->Write(0, "abcdefgh", 8).IsNoSpace());
  EXPECT_EQ(Content(Path("f")), "");  // nothing written
  fs_.ClearFaults();
  fs_.AddFault({.op = FaultOp::kWrite, .count = 1, .short_write = true});
  EXPECT_TRUE(f->Write(0, "abcdefgh", 8).IsIOError());
  EXPECT_EQ(Content(Path("f")), "abcd");  // a prefix landed
  ASSERT_OK(f->Write(0, "abcdefgh", 8));  // spent
  ASSERT_OK(fs_.SyncDir(dir_.str()));
  fs_.AddFault({.op = FaultOp::kSync, .count = 1});
  EXPECT_TRUE(f->DataSync().IsIOError());
  PowerCycle();  // the failed sync made nothing durable
  EXPECT_EQ(Content(Path("f")), "");
}

TEST_F(FaultInjectionFsTest, DirectorySyncFailuresLeaveNamesUnsynced) {
  auto f = Create("f");
  fs_.AddFault({.op = FaultOp::kSyncDir, .count = 1});
  EXPECT_TRUE(fs_.SyncDir(dir_.str()).IsIOError());
  PowerCycle();
  EXPECT_EQ(Content(Path("f")), "<absent>");
}

TEST_F(FaultInjectionFsTest, ARenamedDirectoryKeepsItsFilesTracked) {
  ASSERT_OK(fs_.CreateDir(Path("d")));
  {
    ASSERT_OK_AND_ASSIGN(auto f,
                         fs_.OpenFile(Path("d/f"), {.mode = OpenMode::kCreateNew}));
    ASSERT_OK(f->Write(0, "unsynced", 8));
  }
  ASSERT_OK(fs_.RenameFile(Path("d"), Path("e")));
  PowerCycle();
  EXPECT_EQ(Content(Path("e/f")), "<absent>");  // its name was never synced
}

}  // namespace
}  // namespace prefixkv
