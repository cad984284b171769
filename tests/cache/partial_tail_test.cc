// The opt-in partial tail: a store that ends mid-block keeps its last tokens
// (and the sliding-window state at exactly that position) in one marked
// partial block, which Match finds and Restore serves; partial tips take part
// in supersede-on-extend like full ones.
#include <gtest/gtest.h>

#include "prefixkv/advanced/hash.h"
#include "tests/cache/cache_test_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::HybridSpec;
using testing::kBlockTokens;
using testing::kPlaceholderShape;
using testing::kRealRotatingShape;
using testing::KvLayer;
using testing::RotatingLayer;
using testing::RotatingShape;
using testing::TestTiers;

std::vector<int32_t> Conversation(size_t tokens) {
  std::vector<int32_t> t(tokens);
  for (size_t i = 0; i < tokens; ++i) t[i] = static_cast<int32_t>(7 * i + 3);
  return t;
}

class PartialTailTest : public ::testing::Test {
 protected:
  Namespace Register(bool partial) {
    return tiers_.Register(HybridSpec(), {.store_partial_tail = partial}).value();
  }
  StoreResult StoreTurn(Namespace ns, size_t tokens) {
    const int64_t n = static_cast<int64_t>(tokens);
    StatusOr<StoreResult> r =
        cache_.Store(ns, Conversation(tokens),
                     {KvLayer(n, &rng_), RotatingLayer(n, "RotatingKVCache", &rng_)});
    EXPECT_OK(r);
    return r.ok() ? *r : StoreResult{};
  }

  std::mt19937_64 rng_{testing::TestSeed("PartialTailTest")};
  TestTiers tiers_{16u << 20, ""};
  PrefixCache& cache_ = tiers_.cache();
};

TEST_F(PartialTailTest, UnalignedTurnRestoresToItsLastToken) {
  Namespace ns = Register(true);
  const std::vector<int32_t> tokens = Conversation(10);  // 2 full blocks + 2 tokens
  const std::vector<LayerState> layers = {KvLayer(10, &rng_),
                                          RotatingLayer(10, "RotatingKVCache", &rng_)};
  StatusOr<StoreResult> s = cache_.Store(ns, tokens, layers);
  ASSERT_OK(s);
  EXPECT_EQ(s->blocks, 3u);
  EXPECT_TRUE(s->tip_state_stored);
  EXPECT_TRUE(s->note.empty());
  EXPECT_TRUE(testing::ReadBlock(*tiers_.hot, s->tip).partial);

  std::vector<int32_t> prompt = Conversation(15);  // the next turn's prompt
  StatusOr<MatchResult> m = cache_.Match(ns, prompt);
  ASSERT_OK(m);
  EXPECT_EQ(m->keys.size(), 3u);
  EXPECT_EQ(m->matched_tokens(), 10u);
  StatusOr<RestoreResult> r = cache_.Restore(*m);
  ASSERT_OK(r);
  EXPECT_EQ(r->restored_tokens, 10u);
  EXPECT_TRUE(r->reason.empty()) << r->reason;
  EXPECT_EQ(r->layers[0], layers[0]);
  EXPECT_EQ(r->layers[1].tensors, layers[1].tensors);
  EXPECT_EQ(RotatingMeta::Parse(r->layers[1].meta)->offset, 10);
}

TEST_F(PartialTailTest, WithoutOptInTheTailIsNotStored) {
  Namespace ns = Register(false);
  StoreResult s = StoreTurn(ns, 10);
  EXPECT_EQ(s.blocks, 2u);
  EXPECT_FALSE(s.tip_state_stored);
  EXPECT_EQ(cache_.Match(ns, Conversation(15))->matched_tokens(), 2 * kBlockTokens);
}

TEST_F(PartialTailTest, PartialTipsAreSupersededLikeFullTips) {
  Namespace ns = Register(true);
  const BlockKey t1 = StoreTurn(ns, 6).tip;   // partial: 1 block + 2 tokens
  const BlockKey t2 = StoreTurn(ns, 11).tip;  // partial: 2 blocks + 3 tokens
  EXPECT_EQ(RotatingShape(*tiers_.hot, t1), kRealRotatingShape);
  const StoreResult s3 = StoreTurn(ns, 16);  // full: 4 blocks
  EXPECT_EQ(s3.stripped_tip, t1);
  EXPECT_EQ(RotatingShape(*tiers_.hot, t1), kPlaceholderShape);
  EXPECT_EQ(RotatingShape(*tiers_.hot, t2), kRealRotatingShape);
  const StoreResult s4 = StoreTurn(ns, 19);  // partial: 4 blocks + 3 tokens
  EXPECT_EQ(s4.stripped_tip, t2);
  EXPECT_EQ(RotatingShape(*tiers_.hot, s3.tip), kRealRotatingShape);
  // A prompt that diverges inside t2's tail falls back to the last full block
  // that carries real state: none before block 4, so walk-back reports it.
  std::vector<int32_t> diverged = Conversation(11);
  diverged[9] = -1;
  StatusOr<MatchResult> m = cache_.Match(ns, diverged);
  EXPECT_EQ(m->matched_tokens(), 2 * kBlockTokens);
  EXPECT_EQ(cache_.Restore(*m)->restored_tokens, 0u);
}

TEST_F(PartialTailTest, PartialBlockIsValidatedAgainstTheMatchedLength) {
  Namespace ns = Register(true);
  StoreTurn(ns, 7);
  StatusOr<MatchResult> m = cache_.Match(ns, Conversation(7));
  ASSERT_EQ(m->matched_tokens(), 7u);
  // A MatchResult that lies about the tail length is refused outright.
  MatchResult wrong = *m;
  wrong.tokens.pop_back();
  wrong.tokens.pop_back();
  wrong.tokens.pop_back();
  EXPECT_TRUE(cache_.Restore(wrong).status().IsInvalidArgument());
  wrong.tokens.push_back(1);
  StatusOr<RestoreResult> r = cache_.Restore(wrong);
  ASSERT_OK(r);
  EXPECT_EQ(r->restored_tokens, 0u);  // the 3-token tail block is not 1 token
  EXPECT_NE(r->reason.find("block 1"), std::string::npos) << r->reason;
}

// A partial tip stored by an earlier, shorter store sits beside the chain a
// longer store continued with full blocks. A prompt that re-sends the earlier
// conversation plus a different message (a regenerated answer) matches those
// full blocks, whose rotating layers are placeholders; the restore must still
// find the partial tip on its path instead of restoring nothing.
TEST_F(PartialTailTest, AnEarlierPartialTipBesideTheChainIsRestored) {
  Namespace ns = Register(true);
  StoreTurn(ns, 6);   // block 0 + a partial tip of 2 tokens (4..5)
  StoreTurn(ns, 12);  // blocks 0, 1, 2: block 1 covers 4..7 as a placeholder
  // The first 8 tokens again, then a different message.
  std::vector<int32_t> prompt = Conversation(8);
  prompt.insert(prompt.end(), {901, 902, 903, 904, 905});
  StatusOr<MatchResult> m = cache_.Match(ns, prompt);
  ASSERT_OK(m);
  // Full blocks 0 and 1 match and hold placeholders for the rotating layer;
  // the 6-token tip hangs off block 0, beside block 1.
  EXPECT_EQ(m->matched_tokens(), 8u);
  StatusOr<RestoreResult> r = cache_.Restore(*m);
  ASSERT_OK(r);
  EXPECT_EQ(r->restored_tokens, 6u) << r->reason;
  ASSERT_EQ(r->layers.size(), 2u);
  EXPECT_EQ(r->layers[0].tensors[0].dim(2), 6);  // the KV slices up to the tip
  EXPECT_EQ(RotatingMeta::Parse(r->layers[1].meta)->offset, 6);

  // Re-sending the 12-token conversation with one more token: the full-block
  // path reaches the 12-token tip, which is longer: that one wins.
  std::vector<int32_t> longer = Conversation(12);
  longer.push_back(77);
  r = cache_.Restore(cache_.Match(ns, longer).value());
  ASSERT_OK(r);
  EXPECT_EQ(r->restored_tokens, 12u);
}

// Match looks for a partial tail of every length below block_tokens after
// the last full block. A key per length hashed the tail again each time
// (block_tokens^2 / 2 tokens): in a namespace of large blocks (PKV.REGISTER
// takes up to 4,194,304) one Match of a long prompt hashed terabytes and held
// its thread for hours. The keys come from one pass over the tail now, and
// are still the chain keys a store gives its tails.
TEST_F(PartialTailTest, AMatchHashesAHugeBlocksTailCandidatesInOnePass) {
  NamespaceSpec spec = testing::KvOnlySpec();
  spec.block_tokens = 1u << 16;
  const Namespace ns = tiers_.Register(spec, {.store_partial_tail = true}).value();
  constexpr size_t kStored = 3000, kPrompt = 8000;
  const std::vector<int32_t> stored = Conversation(kStored);
  ASSERT_OK(cache_.Store(ns, stored, testing::KvOnlyLayers(kStored)));

  std::vector<int32_t> prompt = Conversation(kPrompt);
  prompt[kStored - 1] = -1;  // no tail of the prompt is cached: every length is tried
  uint64_t hashed = ThreadHashedBytes();
  StatusOr<MatchResult> m = cache_.Match(ns, prompt);
  hashed = ThreadHashedBytes() - hashed;
  ASSERT_OK(m);
  EXPECT_EQ(m->matched_tokens(), 0u);
  // One pass: the parent and each token once (a key per length: ~128 MB).
  EXPECT_LE(hashed, 2 * (16 + sizeof(int32_t) * kPrompt)) << hashed << " bytes hashed";

  // The tail found is the one stored, and it restores.
  m = cache_.Match(ns, Conversation(kPrompt));
  ASSERT_OK(m);
  EXPECT_EQ(m->matched_tokens(), kStored);
  StatusOr<RestoreResult> r = cache_.Restore(*m);
  ASSERT_OK(r);
  EXPECT_EQ(r->restored_tokens, kStored) << r->reason;
}

// Match reads every tail candidate's key off one hash stream; each must be
// exactly the key a store gives a tail of that length, ChainKey(parent,
// tail) (the tokens' bytes in memory order, all 128 bits), whether ChainKey
// hashes it in one shot (up to 2,048 tokens) or streams it. Random block
// sizes, tail lengths and token values (negative ones too).
TEST_F(PartialTailTest, EveryTailCandidatesKeyIsTheChainKeyAStoreGivesIt) {
  std::mt19937_64 rng(testing::TestSeed("EveryTailCandidatesKeyIsTheChainKey"));
  for (int trial = 0; trial < 12; ++trial) {
    NamespaceSpec spec = testing::KvOnlySpec();
    spec.block_tokens = static_cast<uint32_t>(2 + rng() % 3000);
    spec.salt = "trial" + std::to_string(trial);
    const Namespace ns = tiers_.Register(spec, {.store_partial_tail = true}).value();
    const size_t full = rng() % 2;
    const size_t tail = 1 + rng() % (spec.block_tokens - 1);
    const size_t stored = full * spec.block_tokens + tail;
    std::vector<int32_t> prompt(stored + 1 + rng() % spec.block_tokens);
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng());
    const std::span<const int32_t> turn(prompt.data(), stored);
    SCOPED_TRACE("block " + std::to_string(spec.block_tokens) + ", tail " +
                 std::to_string(tail));
    ASSERT_OK(
        cache_.Store(ns, turn, testing::KvOnlyLayers(static_cast<int64_t>(stored))));

    StatusOr<MatchResult> m = cache_.Match(ns, prompt);
    ASSERT_OK(m);
    ASSERT_EQ(m->matched_tokens(), stored);
    const BlockKey parent = full == 0 ? NamespaceRoot(spec).value() : m->keys.front();
    EXPECT_EQ(m->keys.back(), ChainKey(parent, turn.subspan(full * spec.block_tokens)));
  }
}

}  // namespace
}  // namespace prefixkv
