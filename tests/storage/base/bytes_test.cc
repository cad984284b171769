// SharedBytes: copies share bytes; large buffers are recycled once freed (a
// fresh one costs a page fault per 4 KiB), small ones are not; a buffer from
// AllocateBuffer is adopted without a copy, or released with free().
#include "prefixkv/bytes.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace prefixkv {
namespace {

TEST(SharedBytes, CopiesAndSlicesShareTheBytes) {
  const SharedBytes b = SharedBytes::Copy("hello world");
  const SharedBytes same = b;
  const SharedBytes world = b.Slice(6, 5);
  EXPECT_EQ(same.data(), b.data());
  EXPECT_EQ(world.view(), "world");
  EXPECT_EQ(world.data(), b.data() + 6);
  EXPECT_EQ(b.use_count(), 3);
}

TEST(SharedBytes, AllocateIs64ByteAlignedWithZeroedPadding) {
  uint8_t* out = nullptr;
  const SharedBytes b = SharedBytes::Allocate(100, &out);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  EXPECT_EQ(b.size(), 100u);
  for (size_t i = 100; i < 128; ++i) EXPECT_EQ(out[i], 0) << i;
}

TEST(SharedBytes, AFreedLargeBufferIsReusedForTheSameSize) {
  constexpr size_t kSize = 1 << 20;
  const uint8_t* first = nullptr;
  {
    uint8_t* out = nullptr;
    SharedBytes b = SharedBytes::Allocate(kSize, &out);
    std::memset(out, 0xab, kSize);
    first = b.data();
  }
  uint8_t* out = nullptr;
  const SharedBytes again = SharedBytes::Allocate(kSize, &out);
  EXPECT_EQ(again.data(), first) << "the freed buffer, already paged in";
  EXPECT_EQ(out[kSize / 2], 0xab) << "its pages, not fresh zeroed ones";
  // While it is in use, another one of the same size is a different buffer.
  const SharedBytes other = SharedBytes::Allocate(kSize, &out);
  EXPECT_NE(other.data(), again.data());
}

TEST(SharedBytes, AnAdoptedBufferIsNotCopiedAndIsRecycled) {
  constexpr size_t kCapacity = 300000;
  void* p = SharedBytes::AllocateBuffer(kCapacity);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % SharedBytes::kBufferAlign, 0u);
  std::memset(p, 7, kCapacity);
  {
    const SharedBytes b = SharedBytes::AdoptBuffer(p, kCapacity, kCapacity - 1);
    EXPECT_EQ(b.data(), p);
    EXPECT_EQ(b.size(), kCapacity - 1);
    EXPECT_EQ(b.data()[kCapacity - 2], 7);
  }
  EXPECT_EQ(SharedBytes::AllocateBuffer(kCapacity), p) << "back from the recycler";
  std::free(p);  // free() may release any of them (losing only the recycling)
  void* small = SharedBytes::AllocateBuffer(10);
  std::free(small);
}

}  // namespace
}  // namespace prefixkv
