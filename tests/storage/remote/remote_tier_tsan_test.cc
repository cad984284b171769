// RemoteTier under ThreadSanitizer: Put, Get, GetMany, Flush and Counters
// from several threads while two background writers drain the queue.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "prefixkv/advanced/remote_tier.h"
#include "tests/support/fake_remote_store.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::FakeRemoteState;
using testing::FakeRemoteStore;

const BlockKey kNs{7, 7};

BlockMeta Meta(uint64_t i) { return BlockMeta{BlockKey{7, 1000 + i}, kNs, kNs, 1}; }

SharedBytes Payload(uint64_t i) {
  return SharedBytes::Copy(std::string(200, char('a' + i % 26)));
}

TEST(RemoteTierTsan, ConcurrentWritersAndReadersAgreeWithTheStore) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  auto state = std::make_shared<FakeRemoteState>();
  RemoteTierOptions o;
  o.writer_threads = 2;
  o.write_batch_blocks = 4;
  auto tier = RemoteTier::Open(std::make_unique<FakeRemoteStore>(state), o);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + t);
      for (int n = 0; n < 300; ++n) {
        const uint64_t i = rng() % 64;
        switch (rng() % 4) {
          case 0:
          case 1:
            (void)tier->Put(Meta(i), Payload(i), false);
            break;
          case 2: {
            StatusOr<SharedBytes> got = tier->Get(Meta(i).key);
            if (got.ok()) {
              EXPECT_EQ(got->view(), Payload(i).view()) << "block " << i;
            }
            break;
          }
          default: {
            std::vector<BlockKey> keys = {Meta(i).key, Meta((i + 1) % 64).key};
            (void)tier->GetMany(keys);
            // Every scrape adds up while the others read: each hit with its
            // bytes (every payload is 200 bytes).
            const RemoteCounters c = tier->Counters();
            EXPECT_EQ(c.bytes_read, c.hits * 200);
            EXPECT_LE(c.corruptions, c.misses);
            if (n % 50 == 0) tier->Flush();
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  tier->Flush();
  const RemoteCounters c = tier->Counters();
  EXPECT_EQ(c.queued_blocks, 0u);
  EXPECT_EQ(c.queued_bytes, 0u);
  EXPECT_EQ(c.dropped, 0u);
  EXPECT_EQ(c.corruptions, 0u);
  EXPECT_LE(state->size(), 64u);
}

}  // namespace
}  // namespace prefixkv
