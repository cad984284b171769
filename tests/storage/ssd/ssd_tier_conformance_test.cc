// SsdTier passes the same typed BlockTier suite as the in-memory tiers, with
// either order among its chain leaves.
#include <gtest/gtest.h>

#include <limits>

#include "prefixkv/advanced/ssd_tier.h"
#include "tests/storage/tier_conformance.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

template <EvictionPolicyKind kPolicy>
struct SsdTierFactoryWith {
  static std::unique_ptr<BlockTier> Make(const testing::TempDir& dir,
                                         uint64_t capacity_bytes) {
    SsdTierOptions o;
    o.policy = kPolicy;
    o.path = (dir.path() / "ssd").string();
    o.capacity_bytes =
        capacity_bytes == 0 ? std::numeric_limits<uint64_t>::max() : capacity_bytes;
    o.write_buffer_bytes = 4 << 20;
    o.log = [](std::string_view) {};
    StatusOr<std::unique_ptr<SsdTier>> tier = SsdTier::Open(o);
    EXPECT_OK(tier);
    return tier.ok() ? std::move(tier).value() : nullptr;
  }
};
using SsdTierFactory = SsdTierFactoryWith<EvictionPolicyKind::kLeafLru>;
// The chain order among leaves keeps every contract too.
using SsdChainTierFactory = SsdTierFactoryWith<EvictionPolicyKind::kChain>;

}  // namespace
namespace testing {
using SsdFactories = ::testing::Types<SsdTierFactory, SsdChainTierFactory>;
INSTANTIATE_TYPED_TEST_SUITE_P(Ssd, TierConformance, SsdFactories);
}  // namespace testing
}  // namespace prefixkv
