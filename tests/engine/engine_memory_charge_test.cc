// Engine::OpenMemoryCharge: memory held outside the blocks (live sessions'
// KV) charged to the engine's one RAM budget. A charge is a budget owner
// without blocks; it makes room by evicting cached blocks, which spill to
// SSD and stay readable; each handle returns only its own bytes, and what it
// still holds when destroyed.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "prefixkv/engine.h"
#include "prefixkv/memory_charge.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

using testing::TempDir;

constexpr uint64_t kCapacity = 64 << 10;

std::unique_ptr<Engine> OpenEngine(const std::string& dir,
                                   uint64_t capacity = kCapacity) {
  EngineOptions o;
  o.data_dir = dir;
  o.hot_capacity_bytes = capacity;
  o.log = [](std::string_view) {};
  auto engine = Engine::Open(o);
  EXPECT_OK(engine);
  return engine.ok() ? std::move(engine).value() : nullptr;
}

const EngineOwnerStats* Owner(const EngineStats& stats, const std::string& name) {
  for (const EngineOwnerStats& o : stats.owners) {
    if (o.name == name) return &o;
  }
  return nullptr;
}
// The result points into `stats`: a temporary would dangle.
const EngineOwnerStats* Owner(EngineStats&& stats, const std::string& name) = delete;

TEST(EngineMemoryCharge, OpeningANameAgainReturnsAnotherHandleOfTheSameOwner) {
  TempDir dir;
  auto engine = OpenEngine(dir.str());
  ASSERT_OK_AND_ASSIGN(auto first, engine->OpenMemoryCharge("sessions", 32 << 10));
  ASSERT_OK_AND_ASSIGN(auto second, engine->OpenMemoryCharge("sessions", 32 << 10));
  EXPECT_EQ(engine->Stats().owners.size(), 1u);
  EXPECT_EQ(first->name(), "sessions");
  EXPECT_EQ(first->limit_bytes(), uint64_t{32} << 10);

  ASSERT_OK(first->Charge(1000, nullptr));
  ASSERT_OK(second->Charge(500, nullptr));
  {
    const EngineStats charged = engine->Stats();
    ASSERT_NE(Owner(charged, "sessions"), nullptr);
    EXPECT_EQ(Owner(charged, "sessions")->hot.external_bytes, 1500u);
  }
  EXPECT_TRUE(second->Uncharge(501).IsInvalidArgument()) << "only its own bytes";
  ASSERT_OK(second->Uncharge(500));
  second.reset();
  first.reset();                              // returns its 1000 bytes
  const EngineStats stats = engine->Stats();  // Owner() points into it
  const EngineOwnerStats* owner = Owner(stats, "sessions");
  ASSERT_NE(owner, nullptr);
  EXPECT_EQ(owner->hot.bytes, 0u);
  EXPECT_EQ(owner->hot_quota_bytes, std::optional<uint64_t>(32 << 10));
}

TEST(EngineMemoryCharge, RejectsBadNamesQuotasAndEnginesWithoutAHotTier) {
  TempDir dir;
  auto engine = OpenEngine(dir.str());
  NamespaceSpec spec{.model = "llama",
                     .block_tokens = 4,
                     .dtype = DType::kFloat32,
                     .layer_types = {"KVCache"}};
  ASSERT_OK(engine->RegisterModel(spec));
  ASSERT_OK(engine->OpenMemoryCharge("sessions"));
  EXPECT_TRUE(engine->OpenMemoryCharge("llama").status().IsInvalidArgument());
  EXPECT_TRUE(engine->OpenMemoryCharge("").status().IsInvalidArgument());
  EXPECT_TRUE(engine->OpenMemoryCharge("zero", 0).status().IsInvalidArgument());
  EXPECT_TRUE(engine->OpenMemoryCharge("sessions", 4096).status().IsInvalidArgument())
      << "another quota than it was opened with";
  ASSERT_OK(engine->Close());
  EXPECT_TRUE(engine->OpenMemoryCharge("sessions").status().IsInvalidArgument());

  TempDir cold;
  auto ssd_only = OpenEngine(cold.str(), /*capacity=*/0);
  EXPECT_TRUE(ssd_only->OpenMemoryCharge("sessions").status().IsInvalidArgument());
}

TEST(EngineMemoryCharge, AChargeSpillsCachedBlocksToSsdWhereTheyStayReadable) {
  TempDir dir;
  auto engine = OpenEngine(dir.str());
  for (int i = 0; i < 12; ++i) {
    ASSERT_OK(engine->PutValue("v" + std::to_string(i),
                               SharedBytes::Copy(std::string(4000, 'a' + i))));
  }
  const EngineStats before = engine->Stats();
  ASSERT_OK_AND_ASSIGN(auto sessions, engine->OpenMemoryCharge("sessions"));
  ASSERT_OK(sessions->Charge(kCapacity - 8000, nullptr));
  const EngineStats after = engine->Stats();
  EXPECT_GT(after.hot.evictions, before.hot.evictions);
  EXPECT_LE(after.hot.bytes, kCapacity);
  EXPECT_EQ(after.hot.external_bytes, kCapacity - 8000);
  for (int i = 0; i < 12; ++i) {
    ASSERT_OK_AND_ASSIGN(SharedBytes value, engine->GetValue("v" + std::to_string(i)));
    EXPECT_EQ(value.size(), 4000u);
    EXPECT_EQ(value.data()[0], static_cast<uint8_t>('a' + i)) << i;
  }
  ASSERT_OK_AND_ASSIGN(EngineAudit audit, engine->Audit());
  EXPECT_TRUE(audit.ok());
}

TEST(EngineMemoryCharge, AChargeThatCannotFitReportsItsShortfall) {
  TempDir dir;
  auto engine = OpenEngine(dir.str());
  ASSERT_OK_AND_ASSIGN(auto a, engine->OpenMemoryCharge("a"));
  ASSERT_OK_AND_ASSIGN(auto b, engine->OpenMemoryCharge("b"));
  ASSERT_OK(a->Charge(kCapacity - 100, nullptr));
  uint64_t shortfall = 0;
  EXPECT_TRUE(b->Charge(150, &shortfall).IsNoSpace());
  EXPECT_EQ(shortfall, 50u) << "charges are never evicted";
  EXPECT_EQ(b->charged_bytes(), 0u);
  EXPECT_TRUE(b->Charge(kCapacity + 1, &shortfall).IsNoSpace());
  EXPECT_EQ(shortfall, UINT64_MAX);
  ASSERT_OK(a->Uncharge(50));
  ASSERT_OK(b->Charge(150, nullptr));
  EXPECT_EQ(engine->Stats().hot.bytes, kCapacity);
}

}  // namespace
}  // namespace prefixkv
