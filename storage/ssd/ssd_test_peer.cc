// SsdTierTestPeer (see ssd_test_peer.h).
#include "ssd_test_peer.h"

#include "ssd_tier_impl.h"

namespace prefixkv {

StatusOr<std::unique_ptr<SsdTier>> SsdTierTestPeer::OpenWithCommitHook(
    const SsdTierOptions& options, std::function<Status()> before_commit) {
  PKV_RETURN_IF_ERROR(ssd::TierImpl::ValidateOptions(options));
  auto impl = std::make_unique<ssd::TierImpl>(options);
  impl->SetCommitHookForTest(std::move(before_commit));
  PKV_RETURN_IF_ERROR(impl->Open());
  return ssd::Access::Wrap(std::move(impl));
}

}  // namespace prefixkv
