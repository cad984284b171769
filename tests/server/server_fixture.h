// A running in-process server for tests, over an Engine wired as `prefixkv
// serve` wires it: a bounded hot tier (write-back) in front of a real SSD tier
// in a temporary directory. Plus what PKV.* tests send: PKV.REGISTER
// arguments for a spec, and block records encoded by the engine's own Store
// (exactly what a correct client sends).
#pragma once

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/advanced/ssd_tier.h"
#include "prefixkv/block_key.h"
#include "prefixkv/codec.h"
#include "prefixkv/engine.h"
#include "prefixkv/namespace_spec.h"
#include "prefixkv/server.h"
#include "tests/cache/cache_test_util.h"
#include "tests/server/resp_client.h"
#include "tests/support/test_util.h"

namespace prefixkv::testing {

class ServerFixture : public ::testing::Test {
 protected:
  // Opens the engine and starts the server; tests adjust options_ and
  // engine_options_ first when they need to.
  void StartServer(uint64_t hot_capacity_bytes = 64 << 20) {
    engine_options_.hot_capacity_bytes = hot_capacity_bytes;
    if (engine_options_.data_dir.empty()) engine_options_.data_dir = dir_.str() + "/data";
    engine_options_.log = [](std::string_view) {};
    EngineHooks hooks;
    hooks.configure_ssd = [](SsdTierOptions& o) { o.write_buffer_bytes = 4 << 20; };
    ASSERT_OK_AND_ASSIGN(engine_, OpenEngine(engine_options_, std::move(hooks)));
    server_ = std::make_unique<Server>(options_, engine_.get());
    ASSERT_OK(server_->Start());
    ASSERT_NE(server_->port(), 0);
  }

  std::unique_ptr<RespClient> Connect() {
    auto c = std::make_unique<RespClient>(server_->port());
    EXPECT_TRUE(c->connected());
    return c;
  }

  // The stats of the hot-budget owner `name` ("values": the raw keys).
  TierCounters OwnerHot(const std::string& name) {
    for (const EngineOwnerStats& o : engine_->Stats().owners) {
      if (o.name == name) return o.hot;
    }
    return {};
  }

  void TearDown() override {
    if (server_) server_->Stop();
    if (engine_) {
      EXPECT_OK(engine_->Close());
    }
  }

  ServerOptions options_;
  EngineOptions engine_options_;
  TempDir dir_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Server> server_;
};

// Raises this process's open-file limit toward `wanted` (up to the hard
// limit); the limit in force after.
inline size_t RaiseOpenFileLimit(size_t wanted) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < wanted) {
    limit.rlim_cur = std::min<rlim_t>(wanted, limit.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &limit);
    ::getrlimit(RLIMIT_NOFILE, &limit);
  }
  return limit.rlim_cur;
}

// PKV.REGISTER's arguments for `spec`.
inline std::vector<std::string> RegisterArgs(const NamespaceSpec& spec,
                                             bool partial_tail = false) {
  std::string types;
  for (const std::string& t : spec.layer_types) types += (types.empty() ? "" : ",") + t;
  std::vector<std::string> args = {"PKV.REGISTER", spec.model,
                                   std::to_string(spec.block_tokens),
                                   std::string(DTypeName(spec.dtype)), types};
  if (!spec.salt.empty()) args.insert(args.end(), {"SALT", spec.salt});
  // The later spec fields, each when set, as the manifest writes them.
  const std::pair<const char*, const char*> keywords[] = {{"revision", "REVISION"},
                                                          {"tokenizer_hash", "TOKENIZER"},
                                                          {"layer_shapes", "SHAPES"},
                                                          {"quantization", "QUANT"},
                                                          {"tp", "TP"},
                                                          {"pp", "PP"}};
  for (const auto& [field, value] : ManifestFields(spec)) {
    for (const auto& [name, keyword] : keywords) {
      if (field == name && !value.empty()) args.insert(args.end(), {keyword, value});
    }
  }
  if (partial_tail) args.push_back("PARTIAL_TAIL");
  return args;
}

// The encoded blocks a Store of `tokens` leaves in `spec`'s namespace (KV and
// rotating layers as cache_test_util.h makes them), in chain order; from an
// engine of their own, so every tip is real.
inline std::vector<std::string> EncodedStore(const NamespaceSpec& spec,
                                             const std::vector<int32_t>& tokens,
                                             ModelOptions options = {}) {
  auto engine = Engine::Open({.hot_capacity_bytes = 64 << 20}).value();
  Namespace ns = engine->RegisterModel(spec, options).value();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const bool kv_only = spec.layer_types == KvOnlySpec().layer_types;
  EXPECT_OK(engine->Store(ns, tokens, kv_only ? KvOnlyLayers(n) : HybridLayers(n)));
  const MatchResult match = engine->Match(ns, tokens).value();
  std::vector<std::string> out;
  for (const BlockKey& key : match.keys) {
    out.emplace_back(engine->GetBlock(ns, key).value().view());
  }
  return out;
}

// Tokens as the int32 little-endian blob PKV.MATCH takes.
inline std::string TokenBlob(const std::vector<int32_t>& tokens) {
  return std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4);
}

// The command `PKV.PUT records...`.
inline std::vector<std::string> PutArgs(const std::vector<std::string>& records) {
  std::vector<std::string> args = {"PKV.PUT"};
  args.insert(args.end(), records.begin(), records.end());
  return args;
}

}  // namespace prefixkv::testing
