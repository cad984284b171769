// BlobStore: hot-then-SSD reads with promotion, write-back puts, the SSD
// fallback for blocks too large for RAM, and removal from every tier.
#include "blob_store.h"

#include <gtest/gtest.h>

#include "prefixkv/advanced/mem_tier.h"
#include "tests/server/server_fixture.h"
#include "tests/support/test_util.h"

namespace prefixkv::server {
namespace {

BlockMeta Meta(std::string_view raw_key) {
  BlockMeta m;
  m.key = BlobStore::RawKey(raw_key);
  return m;
}

class BlobStoreTest : public ::testing::Test {
 protected:
  MemTier hot_{MemTierOptions{MemTier::Charge(100) * 2}};  // two 100-byte values
  MemTier ssd_;
  testing::WriteBackToTier write_back_{&ssd_};
  BlobStore store_{&hot_, &ssd_};

  void SetUp() override { hot_.SetEvictionListener(&write_back_); }
};

TEST_F(BlobStoreTest, RawKeysAreStableAndDistinct) {
  EXPECT_EQ(BlobStore::RawKey("a"), BlobStore::RawKey("a"));
  EXPECT_NE(BlobStore::RawKey("a"), BlobStore::RawKey("b"));
  EXPECT_NE(BlobStore::RawKey(""), BlobStore::RawKey("raw|"));
}

TEST_F(BlobStoreTest, PutsIntoTheHotTierAsDirty) {
  ASSERT_OK(store_.Put(Meta("a"), SharedBytes::Copy(std::string(100, 'a'))));
  EXPECT_TRUE(hot_.Contains(BlobStore::RawKey("a")));
  EXPECT_FALSE(ssd_.Contains(BlobStore::RawKey("a")));
  // Two more values evict "a"; being dirty, it is written back, not dropped.
  ASSERT_OK(store_.Put(Meta("b"), SharedBytes::Copy(std::string(100, 'b'))));
  ASSERT_OK(store_.Put(Meta("c"), SharedBytes::Copy(std::string(100, 'c'))));
  EXPECT_FALSE(hot_.Contains(BlobStore::RawKey("a")));
  EXPECT_TRUE(ssd_.Contains(BlobStore::RawKey("a")));
}

TEST_F(BlobStoreTest, PromotesAnSsdHitIntoTheHotTier) {
  ASSERT_OK(ssd_.Put(Meta("old"), SharedBytes::Copy("cold value"), false));
  StatusOr<SharedBytes> got = store_.Get(BlobStore::RawKey("old"));
  ASSERT_OK(got);
  EXPECT_EQ(got->view(), "cold value");
  EXPECT_TRUE(hot_.Contains(BlobStore::RawKey("old")));
  EXPECT_EQ(ssd_.Totals().hits, 1u);
  ASSERT_OK(store_.Get(BlobStore::RawKey("old")));
  EXPECT_EQ(ssd_.Totals().hits, 1u);  // the second read is served from RAM
}

TEST_F(BlobStoreTest, StoresBlocksTooLargeForRamOnSsdAndDropsTheStaleHotCopy) {
  ASSERT_OK(store_.Put(Meta("k"), SharedBytes::Copy("small")));
  ASSERT_OK(store_.Put(Meta("k"), SharedBytes::Copy(std::string(1000, 'L'))));
  EXPECT_FALSE(hot_.Contains(BlobStore::RawKey("k")));
  StatusOr<SharedBytes> got = store_.Get(BlobStore::RawKey("k"));
  ASSERT_OK(got);
  EXPECT_EQ(got->size(), 1000u);
}

TEST_F(BlobStoreTest, RemovesFromEveryTier) {
  ASSERT_OK(ssd_.Put(Meta("k"), SharedBytes::Copy("v1"), false));
  ASSERT_OK(store_.Put(Meta("k"), SharedBytes::Copy("v2")));
  StatusOr<bool> removed = store_.Remove(BlobStore::RawKey("k"));
  ASSERT_OK(removed);
  EXPECT_TRUE(*removed);
  EXPECT_FALSE(store_.Contains(BlobStore::RawKey("k")));
  EXPECT_TRUE(store_.Get(BlobStore::RawKey("k")).status().IsNotFound());
  EXPECT_FALSE(*store_.Remove(BlobStore::RawKey("k")));
}

TEST(BlobStoreWriteThrough, StoresOnSsdBeforeAcknowledgingAndKeepsACleanRamCopy) {
  MemTier hot(MemTierOptions{MemTier::Charge(100) * 2});
  MemTier ssd;
  testing::WriteBackToTier write_back(&ssd);
  hot.SetEvictionListener(&write_back);
  BlobStore store(&hot, &ssd, /*write_through=*/true);
  ASSERT_OK(store.Put(Meta("a"), SharedBytes::Copy(std::string(100, 'a'))));
  EXPECT_TRUE(ssd.Contains(BlobStore::RawKey("a")));  // before any eviction
  EXPECT_TRUE(hot.Contains(BlobStore::RawKey("a")));
  ASSERT_OK(store.Put(Meta("b"), SharedBytes::Copy(std::string(100, 'b'))));
  ASSERT_OK(store.Put(Meta("c"), SharedBytes::Copy(std::string(100, 'c'))));
  // "a" left RAM clean: nothing had to be written back.
  EXPECT_FALSE(hot.Contains(BlobStore::RawKey("a")));
  EXPECT_EQ(write_back.dirty_calls(), 0u);
  EXPECT_EQ(store.Get(BlobStore::RawKey("a"))->view(), std::string(100, 'a'));
  // Too large for RAM: on SSD only, and an older RAM copy does not shadow it.
  ASSERT_OK(store.Put(Meta("b"), SharedBytes::Copy(std::string(1000, 'B'))));
  EXPECT_FALSE(hot.Contains(BlobStore::RawKey("b")));
  EXPECT_EQ(store.Get(BlobStore::RawKey("b"))->size(), 1000u);
}

TEST(BlobStoreSingleTier, WorksWithOnlyAnSsdTier) {
  MemTier ssd;
  BlobStore store(nullptr, &ssd);
  ASSERT_OK(store.Put(Meta("k"), SharedBytes::Copy("v")));
  EXPECT_EQ(store.Get(BlobStore::RawKey("k"))->view(), "v");
  EXPECT_EQ(store.tiers().size(), 1u);
}

TEST(BlobStoreSingleTier, ReportsNoSpaceWithOnlyAFullHotTier) {
  MemTier hot(MemTierOptions{MemTier::Charge(10)});
  BlobStore store(&hot, nullptr);
  EXPECT_TRUE(store.Put(Meta("k"), SharedBytes::Copy(std::string(11, 'x'))).IsNoSpace());
  EXPECT_TRUE(store.Get(BlobStore::RawKey("k")).status().IsNotFound());
}

}  // namespace
}  // namespace prefixkv::server
