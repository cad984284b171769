// A running in-process server over two MemTiers for tests: `hot` (bounded,
// write-back) in front of `ssd` (unbounded), wired like the real hot + SSD pair
// so BlobStore's promote and write-back paths are exercised.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "prefixkv/advanced/mem_tier.h"
#include "prefixkv/block_key.h"
#include "prefixkv/codec.h"
#include "prefixkv/server.h"
#include "tests/server/resp_client.h"
#include "tests/support/test_util.h"

namespace prefixkv::testing {

// Stores the hot tier's dirty victims in the lower tier, like SsdTier::OnEvict.
class WriteBackToTier final : public EvictionListener {
 public:
  explicit WriteBackToTier(BlockTier* lower) : lower_(lower) {}
  void OnEvict(const BlockMeta& meta, const SharedBytes& payload, bool dirty) override {
    if (dirty) {
      ++dirty_calls_;
      ASSERT_OK(lower_->Put(meta, payload, false));
    }
  }
  // Dirty blocks written back so far.
  uint64_t dirty_calls() const { return dirty_calls_.load(); }

 private:
  BlockTier* lower_;
  std::atomic<uint64_t> dirty_calls_{0};
};

class ServerFixture : public ::testing::Test {
 protected:
  // Starts the server; tests adjust options_ first when they need to.
  void StartServer(uint64_t hot_capacity_bytes = 64 << 20) {
    hot_ = std::make_unique<MemTier>(MemTierOptions{hot_capacity_bytes});
    ssd_ = std::make_unique<MemTier>();
    write_back_ = std::make_unique<WriteBackToTier>(ssd_.get());
    hot_->SetEvictionListener(write_back_.get());
    server_ = std::make_unique<Server>(options_, hot_.get(), ssd_.get());
    ASSERT_OK(server_->Start());
    ASSERT_NE(server_->port(), 0);
  }

  std::unique_ptr<RespClient> Connect() {
    auto c = std::make_unique<RespClient>(server_->port());
    EXPECT_TRUE(c->connected());
    return c;
  }

  void TearDown() override {
    if (server_) server_->Stop();
  }

  ServerOptions options_;
  std::unique_ptr<MemTier> hot_;
  std::unique_ptr<MemTier> ssd_;
  std::unique_ptr<WriteBackToTier> write_back_;
  std::unique_ptr<Server> server_;
};

// A chain of encoded block records for `tokens` in blocks of `block_tokens`
// under namespace `root`, each with one small KV layer.
inline std::vector<std::string> EncodedChain(const BlockKey& root,
                                             const std::vector<int32_t>& tokens,
                                             uint32_t block_tokens) {
  std::vector<BlockKey> keys = ChainKeys(root, tokens, block_tokens);
  std::vector<std::string> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    BlockRecord rec;
    rec.key = keys[i];
    rec.parent = i == 0 ? root : keys[i - 1];
    rec.namespace_id = root;
    rec.token_count = block_tokens;
    rec.tokens.assign(tokens.begin() + i * block_tokens,
                      tokens.begin() + (i + 1) * block_tokens);
    std::string bytes(64, static_cast<char>('a' + i));
    LayerState kv{"KVCache", {std::to_string(block_tokens)}, false, {}};
    kv.tensors.emplace_back(DType::kUInt8, std::vector<int64_t>{64},
                            SharedBytes::Copy(bytes));
    rec.layers.push_back(kv);
    out.emplace_back(EncodeBlock(rec).value().view());
  }
  return out;
}

// Tokens as the int32 little-endian blob PKV.MATCH takes.
inline std::string TokenBlob(const std::vector<int32_t>& tokens) {
  return std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4);
}

}  // namespace prefixkv::testing
