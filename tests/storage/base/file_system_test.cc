// FileSystem::Default(): the POSIX file system behind the SSD tier's seam.
#include "prefixkv/file_system.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::TempDir;

TEST(PosixFileSystem, WritesAndReadsAtOffsetsAndReportsTheEndOfTheFile) {
  TempDir dir;
  FileSystem* fs = FileSystem::Default();
  const std::string path = dir.str() + "/f";
  ASSERT_OK_AND_ASSIGN(auto f, fs->OpenFile(path, {.mode = OpenMode::kCreateNew}));
  EXPECT_EQ(f->path(), path);
  ASSERT_OK(f->Write(0, "hello", 5));
  ASSERT_OK(f->Write(10, "world", 5));  // a hole of zeros in between
  ASSERT_OK(f->DataSync());
  ASSERT_OK(f->Sync());
  ASSERT_OK_AND_ASSIGN(uint64_t size, f->Size());
  EXPECT_EQ(size, 15u);
  char buf[32] = {};
  ASSERT_OK_AND_ASSIGN(size_t got, f->Read(0, sizeof buf, buf));
  EXPECT_EQ(got, 15u);  // short only at the end of the file
  EXPECT_EQ(std::string(buf, 5), "hello");
  EXPECT_EQ(std::string(buf + 5, 5), std::string(5, '\0'));
  ASSERT_OK_AND_ASSIGN(got, f->Read(100, 4, buf));
  EXPECT_EQ(got, 0u);
  ASSERT_OK(f->Truncate(3));
  ASSERT_OK_AND_ASSIGN(size, fs->FileSize(path));
  EXPECT_EQ(size, 3u);
}

TEST(PosixFileSystem, OpenModesCreateTruncateOrRefuse) {
  TempDir dir;
  FileSystem* fs = FileSystem::Default();
  const std::string path = dir.str() + "/f";
  EXPECT_TRUE(fs->OpenFile(path, {.mode = OpenMode::kRead}).status().IsNotFound());
  EXPECT_TRUE(fs->OpenFile(path, {.mode = OpenMode::kReadWrite}).status().IsNotFound());
  {
    ASSERT_OK_AND_ASSIGN(auto f, fs->OpenFile(path, {.mode = OpenMode::kCreateOrOpen}));
    ASSERT_OK(f->Write(0, "abc", 3));
  }
  EXPECT_TRUE(
      fs->OpenFile(path, {.mode = OpenMode::kCreateNew}).status().IsIOError());  // exists
  {
    ASSERT_OK_AND_ASSIGN(auto f, fs->OpenFile(path, {.mode = OpenMode::kCreateOrOpen}));
    EXPECT_EQ(f->Size().value(), 3u);  // kept
  }
  {
    ASSERT_OK_AND_ASSIGN(auto f,
                         fs->OpenFile(path, {.mode = OpenMode::kCreateOrTruncate}));
    EXPECT_EQ(f->Size().value(), 0u);  // emptied
  }
  ASSERT_OK_AND_ASSIGN(auto r, fs->OpenFile(path, {.mode = OpenMode::kRead}));
  EXPECT_TRUE(r->Write(0, "x", 1).IsIOError());  // read only (EBADF)
}

TEST(PosixFileSystem, DirectIoIsGrantedOrSilentlyOffAndAlignedIoWorksEitherWay) {
  TempDir dir;
  FileSystem* fs = FileSystem::Default();
  ASSERT_OK_AND_ASSIGN(
      auto f,
      fs->OpenFile(dir.str() + "/d", {.mode = OpenMode::kCreateNew, .direct_io = true}));
  std::unique_ptr<void, decltype(&std::free)> buf(std::aligned_alloc(4096, 8192),
                                                  &std::free);
  std::memset(buf.get(), 'x', 8192);
  ASSERT_OK(f->Write(4096, buf.get(), 8192));
  std::memset(buf.get(), 0, 8192);
  ASSERT_OK_AND_ASSIGN(size_t got, f->Read(4096, 8192, buf.get()));
  EXPECT_EQ(got, 8192u);
  EXPECT_EQ(static_cast<char*>(buf.get())[8191], 'x');
  // A buffered handle reports that it is one.
  ASSERT_OK_AND_ASSIGN(auto b,
                       fs->OpenFile(dir.str() + "/b", {.mode = OpenMode::kCreateNew}));
  EXPECT_FALSE(b->direct_io());
}

TEST(PosixFileSystem, DirectoryOperations) {
  TempDir dir;
  FileSystem* fs = FileSystem::Default();
  const std::string sub = dir.str() + "/a/b/c";
  ASSERT_OK(fs->CreateDir(sub));
  ASSERT_OK(fs->CreateDir(sub));  // exists: fine
  ASSERT_OK(fs->SyncDir(sub));
  { ASSERT_OK(fs->OpenFile(sub + "/x", {.mode = OpenMode::kCreateNew}).status()); }
  ASSERT_OK(fs->RenameFile(sub + "/x", sub + "/y"));
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> names, fs->ListDir(sub));
  EXPECT_EQ(names, std::vector<std::string>{"y"});
  ASSERT_OK_AND_ASSIGN(names, fs->ListDir(dir.str() + "/a"));
  EXPECT_EQ(names, std::vector<std::string>{"b"});
  EXPECT_TRUE(fs->FileSize(dir.str() + "/a").status().IsInvalidArgument());
  EXPECT_TRUE(fs->FileSize(sub + "/x").status().IsNotFound());
  ASSERT_OK(fs->DeleteFile(sub + "/y"));
  EXPECT_TRUE(fs->DeleteFile(sub + "/y").IsNotFound());
  EXPECT_TRUE(fs->ListDir(dir.str() + "/none").status().IsNotFound());
  // A whole directory renames too (how a damaged database is moved aside).
  ASSERT_OK(fs->RenameFile(dir.str() + "/a", dir.str() + "/moved"));
  ASSERT_OK_AND_ASSIGN(names, fs->ListDir(dir.str() + "/moved/b"));
  EXPECT_EQ(names, std::vector<std::string>{"c"});
  ASSERT_OK(fs->OpenFile(dir.str() + "/file", {.mode = OpenMode::kCreateNew}).status());
  EXPECT_TRUE(fs->CreateDir(dir.str() + "/file").IsIOError());  // a file is in the way
}

}  // namespace
}  // namespace prefixkv
