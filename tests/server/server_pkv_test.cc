// The PKV.* commands through a real TCP connection: registration, stores of
// encoded records through the engine's prefix cache (namespaces, owners,
// lineage, supersede), matches and reads per namespace, and the counters
// (docs/protocol.md, "Prefix-cache blocks").
#include <gtest/gtest.h>

#include <functional>
#include <map>

#include "prefixkv/advanced/hash.h"
#include "tests/server/server_fixture.h"
#include "tests/support/namespace_fields.h"

namespace prefixkv {
namespace {

using testing::EncodedStore;
using testing::HybridSpec;
using testing::KvOnlySpec;
using testing::PutArgs;
using testing::RegisterArgs;
using testing::Reply;
using testing::TokenBlob;
using testing::Tokens;

std::string RootOf(const NamespaceSpec& spec) { return NamespaceRoot(spec)->ToHex(); }
std::string KeyOf(const std::string& record) {
  return PeekBlockIdentity(record).value().key.ToHex();
}
bool RealRotating(const std::string& record) {
  BlockRecord rec = DecodeBlock(SharedBytes::Copy(record)).value();
  return !rec.layers[testing::RotatingIndex(rec)].placeholder;
}
// A PKV.PUT reply's field.
const Reply& Field(const Reply& put, const std::string& name) {
  for (size_t i = 0; i + 1 < put.elems.size(); i += 2) {
    if (put.elems[i].str == name) return put.elems[i + 1];
  }
  static const Reply none;
  ADD_FAILURE() << "no field " << name << " in " << put.str;
  return none;
}

class ServerPkvTest : public testing::ServerFixture {
 protected:
  void SetUp() override {
    options_.admin_pass = "adm";
    StartServer();
    c_ = Connect();
  }
  std::unique_ptr<testing::RespClient> c_;
};

TEST_F(ServerPkvTest, RegisteringAModelRepliesWithItsNamespaceRootAndIsIdempotent) {
  const NamespaceSpec spec = HybridSpec();
  EXPECT_EQ(c_->Call(RegisterArgs(spec)).str, RootOf(spec));
  EXPECT_EQ(c_->Call(RegisterArgs(spec)).str, RootOf(spec));
  EXPECT_EQ(c_->Call(RegisterArgs(spec, /*partial_tail=*/true)).str,
            "ERR model test-model is already registered with other options");
  NamespaceSpec salted = spec;
  salted.salt = "tenant-7";
  EXPECT_EQ(c_->Call(RegisterArgs(salted)).str, RootOf(salted));
  EXPECT_NE(RootOf(salted), RootOf(spec));
  EXPECT_EQ(engine_->model_count(), 2u);
}

// Fail-closed namespaces through the protocol: every later spec field is a
// keyword, keyed only when given, and a bad value is refused by name.
TEST_F(ServerPkvTest, RegisterKeysEveryLaterSpecField) {
  NamespaceSpec spec = testing::WithEveryField(HybridSpec());
  spec.pp_size = 3;
  EXPECT_EQ(c_->Call(RegisterArgs(spec)).str, RootOf(spec));
  NamespaceSpec other = spec;
  other.tokenizer_hash = "def";
  EXPECT_EQ(c_->Call(RegisterArgs(other)).str, RootOf(other));
  EXPECT_NE(RootOf(other), RootOf(spec));
  EXPECT_EQ(RootOf(HybridSpec()), c_->Call(RegisterArgs(HybridSpec())).str);
  EXPECT_EQ(c_->Call({"PKV.REGISTER", "m", "4", "float32", "KVCache", "SHAPES", "2y8"})
                .str.rfind("ERR invalid model spec: layer shape '2y8'", 0),
            0u);
  EXPECT_EQ(c_->Call({"PKV.REGISTER", "m", "4", "float32", "KVCache", "TP", "2/2"})
                .str.rfind("ERR invalid model spec: tensor-parallel rank 2", 0),
            0u);
  EXPECT_EQ(c_->Call({"PKV.REGISTER", "m", "4", "float32", "KVCache", "TOKENIZER"}).str,
            "ERR syntax error");
  EXPECT_EQ(engine_->model_count(), 3u);
  ASSERT_OK_AND_ASSIGN(std::vector<StoredManifest> stored, engine_->Manifests());
  EXPECT_EQ(stored.size(), 3u);
}

TEST_F(ServerPkvTest, RegisterRejectsABadSpec) {
  EXPECT_EQ(c_->Call({"PKV.REGISTER", "m", "4", "float99", "KVCache"})
                .str.rfind("ERR invalid dtype", 0),
            0u);
  // As Redis reads integers: a leading zero or sign, a space or junk is not one.
  for (const char* n : {"0", "04", "+4", "-0", " 4", "4 ", "4x", ""}) {
    EXPECT_EQ(c_->Call({"PKV.REGISTER", "m", n, "float32", "KVCache"}).str,
              "ERR block_tokens must be an integer in [1, 4194304]")
        << n;
  }
  EXPECT_EQ(c_->Call({"PKV.REGISTER", "m", "4", "float32", "KVCache,Nope"})
                .str.rfind("ERR invalid model spec", 0),
            0u);
  EXPECT_EQ(c_->Call({"PKV.REGISTER", "m", "4", "float32", "KVCache", "BOGUS"}).str,
            "ERR syntax error");
  EXPECT_EQ(engine_->model_count(), 0u);
}

TEST_F(ServerPkvTest, CapsTheNumberOfRegisteredModels) {
  server_->Stop();
  options_.max_models = 2;
  server_ = std::make_unique<Server>(options_, engine_.get());
  ASSERT_OK(server_->Start());
  c_ = Connect();
  NamespaceSpec spec = KvOnlySpec();
  for (const char* model : {"a", "b"}) {
    spec.model = model;
    ASSERT_EQ(c_->Call(RegisterArgs(spec)).str, RootOf(spec));
  }
  spec.model = "c";
  EXPECT_EQ(c_->Call(RegisterArgs(spec)).str,
            "ERR too many registered models (the limit is 2)");
  spec.model = "a";  // a registered one still answers
  EXPECT_EQ(c_->Call(RegisterArgs(spec)).str, RootOf(spec));
}

TEST_F(ServerPkvTest, AStoredChainMatchesAndReadsBack) {
  const NamespaceSpec spec = HybridSpec();
  const std::string root = c_->Call(RegisterArgs(spec)).str;
  const std::vector<int32_t> tokens = Tokens(3);
  const std::vector<std::string> records = EncodedStore(spec, tokens);
  Reply put = c_->Call(PutArgs(records));
  ASSERT_EQ(put.type, '*') << put.str;
  EXPECT_EQ(Field(put, "written").integer, 3);
  EXPECT_EQ(Field(put, "tip").str, KeyOf(records[2]));
  EXPECT_EQ(Field(put, "tip_state_stored").integer, 1);
  // One more token than three blocks: the match is the three stored blocks.
  std::vector<int32_t> prompt = Tokens(4);
  Reply m = c_->Call({"PKV.MATCH", root, "4", TokenBlob(prompt)});
  ASSERT_EQ(m.elems.size(), 2u) << m.str;
  EXPECT_EQ(m.elems[0].integer, 3);
  ASSERT_EQ(m.elems[1].elems.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(m.elems[1].elems[i].str, KeyOf(records[i]));
  EXPECT_EQ(c_->Call({"PKV.GET", root, KeyOf(records[1])}).str, records[1]);
  const std::string block3 = ChainKey(*BlockKey::FromHex(KeyOf(records[2])),
                                      std::span<const int32_t>(prompt).subspan(12, 4))
                                 .ToHex();
  EXPECT_TRUE(c_->Call({"PKV.GET", root, block3}).null);
  // Charged to the model's own owner; the same records again write nothing.
  EXPECT_EQ(OwnerHot(spec.model).entries, 3u);
  EXPECT_EQ(Field(c_->Call(PutArgs(records)), "deduplicated").integer, 3);
}

// INFO advisor: the capacity advisor counts the models' block reads and
// writes (not raw keys) and, once the hot tier holds model blocks, estimates
// 1/4x to 8x of its capacity.
TEST_F(ServerPkvTest, InfoAdvisorEstimatesFromTheModelsBlocksOnly) {
  const NamespaceSpec spec = HybridSpec();
  const std::string root = c_->Call(RegisterArgs(spec)).str;
  ASSERT_EQ(c_->Call({"SET", "k", "v"}).str, "OK");
  std::string info = c_->Call({"INFO", "advisor"}).str;
  EXPECT_EQ(info.rfind("# Advisor\r\n", 0), 0u) << info;
  EXPECT_NE(info.find("advisor_references:0\r\n"), std::string::npos) << info;
  EXPECT_EQ(info.find("advisor_hot_"), std::string::npos) << info;
  const std::vector<std::string> records = EncodedStore(spec, Tokens(3));
  ASSERT_EQ(c_->Call(PutArgs(records)).type, '*');
  EXPECT_EQ(c_->Call({"PKV.GET", root, KeyOf(records[0])}).str, records[0]);
  info = c_->Call({"INFO", "advisor"}).str;
  // At most 1 in 8 blocks sampled (CapacityAdvisorOptions::max_rate).
  EXPECT_NE(info.find("advisor_sampling_rate:0.125000\r\n"), std::string::npos) << info;
  for (const char* f :
       {"advisor_hot_0.25x:capacity_bytes=", "advisor_hot_1x:capacity_bytes=",
        "advisor_hot_8x:capacity_bytes="}) {
    EXPECT_NE(info.find(f), std::string::npos) << f << "\n" << info;
  }
  EXPECT_NE(c_->Call({"INFO"}).str.find("# Advisor"), std::string::npos);
}

TEST_F(ServerPkvTest, AChainMayExtendACachedBlock) {
  const NamespaceSpec spec = KvOnlySpec();
  const std::string root = c_->Call(RegisterArgs(spec)).str;
  const std::vector<std::string> records = EncodedStore(spec, Tokens(3));
  ASSERT_EQ(c_->Call(PutArgs({records[0]})).type, '*');
  EXPECT_EQ(c_->Call(PutArgs({records[2]}))
                .str.rfind("ERR invalid block record: record 0: parent", 0),
            0u);
  ASSERT_EQ(c_->Call(PutArgs({records[1], records[2]})).type, '*');
  EXPECT_EQ(c_->Call({"PKV.MATCH", root, "4", TokenBlob(Tokens(3))}).elems[0].integer, 3);
}

// PKV.PUT UNLIKELY: the reuse hint (ReuseHint::kUnlikely) on the blocks the
// store writes; the reply counts the blocks the hot tier took it for.
TEST_F(ServerPkvTest, PutUnlikelyHintsTheBlocksItWrites) {
  const NamespaceSpec spec = KvOnlySpec();
  ASSERT_EQ(c_->Call(RegisterArgs(spec)).type, '$');
  const std::vector<std::string> records = EncodedStore(spec, Tokens(3));
  const Reply hinted = c_->Call({"PKV.PUT", "unlikely", records[0], records[1]});
  EXPECT_EQ(Field(hinted, "written").integer, 2);
  EXPECT_EQ(Field(hinted, "hinted_unlikely").integer, 2);
  // Again with the third block: two deduplicated (not hinted again), one new.
  const Reply again =
      c_->Call({"PKV.PUT", "UNLIKELY", records[0], records[1], records[2]});
  EXPECT_EQ(Field(again, "deduplicated").integer, 2);
  EXPECT_EQ(Field(again, "hinted_unlikely").integer, 1);
  EXPECT_EQ(Field(c_->Call(PutArgs({records[0]})), "hinted_unlikely").integer, 0);
  EXPECT_EQ(c_->Call({"PKV.PUT", "UNLIKELY"}).str,
            "ERR wrong number of arguments for 'pkv.put' command");
}

TEST_F(ServerPkvTest, SupersedeOnExtendStripsTheGrandparentTipOfAHybridModel) {
  const NamespaceSpec spec = HybridSpec();
  const std::string root = c_->Call(RegisterArgs(spec)).str;
  // Three turns, each storing its new block as a real tip.
  const std::string t1 = EncodedStore(spec, Tokens(1))[0];
  const std::string t2 = EncodedStore(spec, Tokens(2))[1];
  const std::string t3 = EncodedStore(spec, Tokens(3))[2];
  EXPECT_TRUE(Field(c_->Call(PutArgs({t1})), "stripped_tip").null);
  EXPECT_TRUE(Field(c_->Call(PutArgs({t2})), "stripped_tip").null);
  EXPECT_EQ(Field(c_->Call(PutArgs({t3})), "stripped_tip").str, KeyOf(t1));
  const std::string g = c_->Call({"PKV.GET", root, KeyOf(t1)}).str;
  EXPECT_FALSE(RealRotating(g)) << "the grandparent tip kept its rotating window";
  EXPECT_TRUE(RealRotating(c_->Call({"PKV.GET", root, KeyOf(t2)}).str));
  EXPECT_TRUE(RealRotating(c_->Call({"PKV.GET", root, KeyOf(t3)}).str));
}

TEST_F(ServerPkvTest, BlocksOfAnUnregisteredNamespaceAreRefused) {
  const NamespaceSpec spec = KvOnlySpec();
  const std::string expected =
      "ERR unknown namespace " + RootOf(spec) + ": PKV.REGISTER it first";
  EXPECT_EQ(c_->Call(PutArgs(EncodedStore(spec, Tokens(1)))).str, expected);
  EXPECT_EQ(c_->Call({"PKV.MATCH", RootOf(spec), "4", TokenBlob(Tokens(1))}).str,
            expected);
  EXPECT_EQ(c_->Call({"PKV.GET", RootOf(spec), RootOf(spec)}).str, expected);
  EXPECT_EQ(engine_->Stats().hot.entries, 0u);
}

TEST_F(ServerPkvTest, RecordsThatDoNotFitTheLayoutOrAreDamagedStoreNothing) {
  const NamespaceSpec spec = HybridSpec();
  c_->Call(RegisterArgs(spec));
  const std::string good = EncodedStore(spec, Tokens(1))[0];
  auto put_modified = [&](const std::function<void(BlockRecord&)>& change) {
    BlockRecord rec = DecodeBlock(SharedBytes::Copy(good)).value();
    change(rec);
    return c_->Call(PutArgs({std::string(EncodeBlock(rec).value().view())})).str;
  };
  const std::string misfit =
      "ERR invalid block record: record 0: does not fit the namespace layout";
  std::string r = put_modified([](BlockRecord& rec) { rec.layers.pop_back(); });
  EXPECT_EQ(r.rfind(misfit, 0), 0u) << r;
  r = put_modified([](BlockRecord& rec) {
    rec.layers[0].tensors[0] = Tensor::Filled(DType::kFloat16, {1, 2, 4, 8}, 1);
  });
  EXPECT_EQ(r.rfind(misfit, 0), 0u) << r;
  r = put_modified([](BlockRecord& rec) {
    rec.layers[0].tensors[0] = Tensor::Filled(DType::kFloat32, {1, 2, 3, 8}, 1);
  });
  EXPECT_EQ(r.rfind(misfit, 0), 0u) << r;
  std::string damaged = good;
  damaged[damaged.size() - 5] ^= 0x40;
  EXPECT_EQ(
      c_->Call(PutArgs({damaged})).str.rfind("ERR invalid block record: record 0", 0),
      0u);
  EXPECT_EQ(c_->Call(PutArgs({"not a record"})).str.rfind("ERR invalid block record", 0),
            0u);
  EXPECT_EQ(OwnerHot(spec.model).entries, 0u);
  EXPECT_EQ(engine_->Stats().ssd.entries, 0u);
}

// A cached block of other shapes than a SHAPES spec's (an older binary's, or
// fetched from a node of one; here rewritten in the tiers) is never served, as
// Engine::Restore never restores one: the client would read its bytes with
// the spec's shapes. PKV.GET answers nil, counts its tokens and the matched
// tokens after it in shape_refused_tokens and removes those blocks, so the
// next PKV.MATCH ends before it and a PKV.PUT of the rest is served again.
TEST_F(ServerPkvTest, AGetNeverServesACachedBlockOfOtherShapes) {
  NamespaceSpec spec = KvOnlySpec();
  spec.layer_shapes = ParseLayerShapes("2x8,2x8").value();
  const std::string root = c_->Call(RegisterArgs(spec)).str;
  const std::vector<std::string> records = EncodedStore(spec, Tokens(3));
  ASSERT_EQ(c_->Call(PutArgs(records)).type, '*');
  // Block 1 rewritten with KV of 1 head where the spec has 2.
  ASSERT_OK_AND_ASSIGN(Namespace ns, engine_->FindModel(*BlockKey::FromHex(root)));
  TierStack* stack = EngineTiers(*engine_, ns);
  const BlockKey key1 = *BlockKey::FromHex(KeyOf(records[1]));
  ASSERT_OK_AND_ASSIGN(BlockMeta meta, stack->Peek(key1));
  BlockRecord rec = DecodeBlock(SharedBytes::Copy(records[1])).value();
  for (LayerState& l : rec.layers) {
    for (Tensor& t : l.tensors) t = Tensor::Filled(DType::kFloat32, {1, 1, 4, 8}, 1);
  }
  ASSERT_OK(stack->Rewrite(meta, EncodeBlock(rec).value()));
  auto stat = [&](const std::string& name) {
    const Reply stats = c_->Call({"PKV.STATS"});
    for (size_t i = 0; i + 1 < stats.elems.size(); i += 2) {
      if (stats.elems[i].str == name) return stats.elems[i + 1].integer;
    }
    ADD_FAILURE() << "no " << name;
    return int64_t{-1};
  };
  const std::string owner = "owner." + spec.model + ".";
  EXPECT_EQ(c_->Call({"PKV.MATCH", root, "4", TokenBlob(Tokens(3))}).elems[0].integer, 3);
  EXPECT_EQ(c_->Call({"PKV.GET", root, KeyOf(records[0])}).str, records[0]);
  const Reply got = c_->Call({"PKV.GET", root, KeyOf(records[1])});
  EXPECT_TRUE(got.null) << "served " << got.str.size()
                        << " bytes of KV of 1 head to a client of 2";
  EXPECT_EQ(stat(owner + "shape_refused_tokens"), 8);  // blocks 1 and 2
  EXPECT_TRUE(c_->Call({"PKV.GET", root, KeyOf(records[2])}).null);
  EXPECT_EQ(stat(owner + "shape_refused_tokens"), 8);  // removed: a plain miss
  EXPECT_EQ(c_->Call({"PKV.MATCH", root, "4", TokenBlob(Tokens(3))}).elems[0].integer, 1);
  // The served restore before it (recorded now) read block 0 alone.
  EXPECT_EQ(stat(owner + "restored_tokens_hot"), 4);
  EXPECT_EQ(Field(c_->Call(PutArgs({records[1], records[2]})), "written").integer, 2);
  EXPECT_EQ(c_->Call({"PKV.MATCH", root, "4", TokenBlob(Tokens(3))}).elems[0].integer, 3);
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_TRUE(c_->Call({"PKV.GET", root, KeyOf(records[i])}).str == records[i]) << i;
  }
  EXPECT_EQ(stat(owner + "shape_refused_tokens"), 8);
}

TEST_F(ServerPkvTest, KeySpacesAreDisjoint) {
  const NamespaceSpec hybrid = HybridSpec();
  const std::string root = c_->Call(RegisterArgs(hybrid)).str;
  const std::string kv_root = c_->Call(RegisterArgs(KvOnlySpec())).str;
  const std::string block = EncodedStore(hybrid, Tokens(1))[0];
  ASSERT_EQ(c_->Call(PutArgs({block})).type, '*');
  ASSERT_EQ(c_->Call({"SET", "k", "v"}).str, "OK");
  ASSERT_OK(engine_->Flush());  // both on the SSD tier every namespace shares
  // A raw key lives under XXH3-128("prefixkv/raw/v3|" + key) with a zero
  // namespace: not a block of any namespace.
  HashStream h(HashStream::Width::k128);
  h.Update("prefixkv/raw/v3|k", 17);
  EXPECT_TRUE(c_->Call({"PKV.GET", root, h.Digest128().ToHex()}).null);
  EXPECT_TRUE(c_->Call({"PKV.GET", kv_root, KeyOf(block)}).null);  // another namespace
  EXPECT_EQ(c_->Call({"PKV.GET", root, KeyOf(block)}).str, block);
  EXPECT_TRUE(c_->Call({"GET", KeyOf(block)}).null);
}

// FLUSHDB / FLUSHALL: admin commands that remove every raw key, in RAM and on
// SSD; blocks are not Redis keys and stay.
TEST_F(ServerPkvTest, FlushdbRemovesEveryRawKeyAndNoBlock) {
  const NamespaceSpec spec = KvOnlySpec();
  const std::string root = c_->Call(RegisterArgs(spec)).str;
  const std::string block = EncodedStore(spec, Tokens(1))[0];
  ASSERT_EQ(c_->Call(PutArgs({block})).type, '*');
  ASSERT_EQ(c_->Call({"MSET", "a", "1", "b", "2"}).str, "OK");
  ASSERT_OK(engine_->Flush());                       // on SSD and clean in RAM
  ASSERT_EQ(c_->Call({"SET", "c", "3"}).str, "OK");  // in RAM only
  EXPECT_EQ(c_->Call({"FLUSHDB"}).str.rfind("NOPERM", 0), 0u);
  EXPECT_EQ(c_->Call({"DBSIZE"}).integer, 3);
  ASSERT_EQ(c_->Call({"AUTH", "admin", "adm"}).str, "OK");
  EXPECT_EQ(c_->Call({"FLUSHDB", "NOW"}).str, "ERR syntax error");
  EXPECT_EQ(c_->Call({"FLUSHDB"}).str, "OK");
  EXPECT_EQ(c_->Call({"DBSIZE"}).integer, 0);
  EXPECT_EQ(c_->Call({"EXISTS", "a", "b", "c"}).integer, 0);
  EXPECT_EQ(c_->Call({"PKV.GET", root, KeyOf(block)}).str, block);
  ASSERT_EQ(c_->Call({"SET", "d", "4"}).str, "OK");
  EXPECT_EQ(c_->Call({"FLUSHALL", "ASYNC"}).str, "OK");
  EXPECT_TRUE(c_->Call({"GET", "d"}).null);
  EXPECT_EQ(c_->Call({"PKV.GET", root, KeyOf(block)}).str, block);
  EXPECT_EQ(c_->Call({"PKV.AUDIT"}).elems.size(), 0u);  // every counter agrees
}

// A chain key hashes its parent's 16 bytes, then the tokens. Raw keys used to
// hash "raw|" + name: a namespace whose root begins with the bytes "raw|"
// (this salt was found by trying 2^32 of them) made the name root[4..16) +
// token bytes hash to the same key as that namespace's first block, so a SET
// replaced a block and a PKV.PUT a value. The raw-key domain is 16 bytes now.
TEST_F(ServerPkvTest, ARawKeyCannotTakeTheKeyOfABlock) {
  NamespaceSpec spec = KvOnlySpec();
  spec.salt = "5de14d7500";
  const BlockKey root = NamespaceRoot(spec).value();
  uint8_t root_bytes[16];
  root.EncodeTo(root_bytes);
  ASSERT_EQ(std::string(reinterpret_cast<char*>(root_bytes), 4), "raw|");
  const std::vector<int32_t> tokens = Tokens(1);
  const std::string name =
      std::string(reinterpret_cast<char*>(root_bytes) + 4, 12) + TokenBlob(tokens);
  const std::string block = EncodedStore(spec, tokens)[0];
  ASSERT_EQ(c_->Call(RegisterArgs(spec)).str, root.ToHex());
  ASSERT_EQ(c_->Call(PutArgs({block})).type, '*');
  ASSERT_EQ(c_->Call({"SET", name, "a raw value"}).str, "OK");
  EXPECT_EQ(c_->Call({"PKV.GET", root.ToHex(), KeyOf(block)}).str, block);
  EXPECT_EQ(c_->Call({"GET", name}).str, "a raw value");
  ASSERT_OK(engine_->Flush());
  EXPECT_EQ(c_->Call({"PKV.GET", root.ToHex(), KeyOf(block)}).str, block);
  EXPECT_EQ(c_->Call({"GET", name}).str, "a raw value");
  EXPECT_EQ(c_->Call({"DEL", name}).integer, 1);
  EXPECT_EQ(
      c_->Call({"PKV.MATCH", root.ToHex(), "4", TokenBlob(tokens)}).elems[0].integer, 1);
}

// PKV.MATCH's block_tokens and PKV.SNAPSHOT's cursor are read as Redis reads
// integers: "04" and "+4" are not 4, "00" is no cursor.
TEST_F(ServerPkvTest, MatchChecksItsArgumentsAgainstTheNamespace) {
  const std::string root = c_->Call(RegisterArgs(KvOnlySpec())).str;
  EXPECT_EQ(c_->Call({"PKV.MATCH", root, "8", ""}).str,
            "ERR block_tokens 8 is not the namespace's 4");
  EXPECT_TRUE(c_->Call({"PKV.MATCH", "zz", "4", ""}).IsError());
  EXPECT_TRUE(c_->Call({"PKV.MATCH", root, "0", ""}).IsError());
  EXPECT_TRUE(c_->Call({"PKV.MATCH", root, "-4", ""}).IsError());
  EXPECT_TRUE(c_->Call({"PKV.MATCH", root, "04", ""}).IsError());
  EXPECT_TRUE(c_->Call({"PKV.MATCH", root, "+4", ""}).IsError());
  EXPECT_EQ(c_->Call({"PKV.SNAPSHOT", "00"}).str, "ERR invalid cursor");
  EXPECT_EQ(c_->Call({"PKV.SNAPSHOT", "+0"}).str, "ERR invalid cursor");
  EXPECT_EQ(c_->Call({"PKV.SNAPSHOT", "0", "COUNT", "01"}).str,
            "ERR value is not an integer or out of range");
  EXPECT_EQ(c_->Call({"PKV.SNAPSHOT", "0"}).elems.size(), 8u);
  EXPECT_TRUE(c_->Call({"PKV.MATCH", root, "4", "abc"}).IsError());
  EXPECT_TRUE(c_->Call({"PKV.GET", root, "0123"}).IsError());
  EXPECT_EQ(c_->Call({"PKV.MATCH", root, "4", ""}).elems[0].integer, 0);
}

TEST_F(ServerPkvTest, HotTotalsInStatsAndInfoAreTheSumOfTheOwners) {
  const NamespaceSpec hybrid = HybridSpec();
  c_->Call(RegisterArgs(hybrid));
  c_->Call(RegisterArgs(KvOnlySpec()));  // same model name: owner "test-model@<root>"
  ASSERT_EQ(c_->Call(PutArgs(EncodedStore(hybrid, Tokens(2)))).type, '*');
  ASSERT_EQ(c_->Call(PutArgs(EncodedStore(KvOnlySpec(), Tokens(3)))).type, '*');
  ASSERT_EQ(c_->Call({"MSET", "a", "1", "b", "22"}).str, "OK");
  Reply stats = c_->Call({"PKV.STATS"});
  std::map<std::string, int64_t> v;
  for (size_t i = 0; i + 1 < stats.elems.size(); i += 2) {
    v[stats.elems[i].str] = stats.elems[i + 1].integer;
  }
  int64_t owner_bytes = 0, owner_entries = 0, owners = 0;
  for (const auto& [name, value] : v) {
    if (name.rfind("owner.", 0) != 0) continue;
    owners += name.ends_with(".entries") ? 1 : 0;
    owner_entries += name.ends_with(".entries") ? value : 0;
    owner_bytes += name.ends_with(".bytes") && !name.ends_with("_bytes") ? value : 0;
  }
  EXPECT_EQ(owners, 3);  // two models and "values"
  EXPECT_EQ(owner_entries, v["hot.entries"]);
  EXPECT_EQ(owner_entries, 2 + 3 + 2);
  EXPECT_EQ(owner_bytes, v["hot.bytes"]);
  // INFO's owner lines add up to its hot total the same way.
  std::string info = c_->Call({"INFO", "tiers"}).str;
  auto number_after = [&](const std::string& text, size_t pos) {
    return std::stoll(text.substr(pos, text.find_first_not_of("0123456789", pos) - pos));
  };
  int64_t info_owner_bytes = 0;
  for (size_t pos = info.find(",bytes="); pos != std::string::npos;
       pos = info.find(",bytes=", pos + 1)) {
    info_owner_bytes += number_after(info, pos + 7);
  }
  EXPECT_EQ(info_owner_bytes, number_after(info, info.find("\nhot_bytes:") + 11));
  EXPECT_EQ(info_owner_bytes, v["hot.bytes"]);
  ASSERT_EQ(c_->Call({"AUTH", "admin", "adm"}).str, "OK");
  Reply audit = c_->Call({"PKV.AUDIT"});
  EXPECT_EQ(audit.type, '*') << audit.str;
  EXPECT_TRUE(audit.elems.empty());
}

// A PKV.MATCH and the PKV.GETs of its blocks on one connection are one
// restore of the model (ServedRestore): timed from the MATCH to the GET that
// reads the last matched block, by the server's clock, into the model's
// restore histogram, and its tokens counted by tier.
class ServerPkvServedRestoreTest : public testing::ServerFixture {
 protected:
  void SetUp() override {
    options_.clock = &clock_;
    StartServer();
    c_ = Connect();
    root_ = c_->Call(RegisterArgs(spec_)).str;
    records_ = EncodedStore(spec_, Tokens(3));
    ASSERT_EQ(c_->Call(PutArgs(records_)).type, '*');
  }
  const EngineOwnerStats Model() {
    for (const EngineOwnerStats& o : engine_->Stats().owners) {
      if (o.name == spec_.model) return o;
    }
    ADD_FAILURE() << "no owner " << spec_.model;
    return {};
  }
  void Match(testing::RespClient& c, size_t blocks) {
    const Reply m = c.Call({"PKV.MATCH", root_, "4", TokenBlob(Tokens(blocks))});
    ASSERT_EQ(m.elems.size(), 2u) << m.str;
    ASSERT_EQ(m.elems[0].integer, static_cast<int64_t>(std::min<size_t>(blocks, 3)));
  }
  void Get(testing::RespClient& c, size_t block) {
    EXPECT_EQ(c.Call({"PKV.GET", root_, KeyOf(records_[block])}).str, records_[block]);
  }

  FakeClock clock_;
  const NamespaceSpec spec_ = KvOnlySpec();
  std::unique_ptr<testing::RespClient> c_;
  std::string root_;
  std::vector<std::string> records_;
};

TEST_F(ServerPkvServedRestoreTest, AMatchThenAGetOfEveryMatchedBlockIsOneTimedRestore) {
  Match(*c_, 4);  // 16 tokens asked, 12 found
  clock_.AdvanceNanos(300'000);
  Get(*c_, 1);  // any order, other commands between
  EXPECT_EQ(c_->Call({"PING"}).str, "PONG");
  Get(*c_, 0);
  EXPECT_EQ(Model().restore_latency->count(), 0u);  // a block is still unread
  clock_.AdvanceNanos(400'000);
  Get(*c_, 1);  // read again: nothing more
  Get(*c_, 2);  // the last: 700 us after the MATCH
  const EngineOwnerStats m = Model();
  ASSERT_TRUE(m.restore_latency && m.prefix_tokens);
  EXPECT_EQ(m.restore_latency->count(), 1u);
  EXPECT_EQ(m.restore_latency->counts[6], 1u);  // (500 us, 1 ms]
  EXPECT_EQ(m.restore_latency->sum_micros, 700u);
  EXPECT_EQ(m.prefix_tokens->query_tokens, 16u);
  EXPECT_EQ(m.prefix_tokens->hit_tokens, 12u);
  EXPECT_EQ(m.prefix_tokens->restored_tokens_hot, 12u);  // PKV.MATCH found them in RAM
  EXPECT_EQ(m.prefix_tokens->restored_tokens_ssd, 0u);
  Get(*c_, 0);  // after the restore: not another one
  EXPECT_EQ(Model().restore_latency->count(), 1u);
}

TEST_F(ServerPkvServedRestoreTest, APartlyReadMatchIsRecordedAtTheNextMatch) {
  Match(*c_, 3);
  clock_.AdvanceNanos(20'000);
  Get(*c_, 0);
  clock_.AdvanceNanos(5'000'000);  // after the last GET: not part of it
  EXPECT_EQ(Model().restore_latency->count(), 0u);
  Match(*c_, 3);  // records the first: 20 us, one block's 4 tokens
  EngineOwnerStats m = Model();
  EXPECT_EQ(m.restore_latency->count(), 1u);
  EXPECT_EQ(m.restore_latency->sum_micros, 20u);
  EXPECT_EQ(m.prefix_tokens->restored_tokens_hot, 4u);
  // Another connection's GETs, unmatched keys and a match of nothing read
  // nothing of this connection's restore.
  auto other = Connect();
  Get(*other, 0);
  Get(*other, 1);
  Get(*other, 2);
  EXPECT_TRUE(c_->Call({"PKV.GET", root_, std::string(32, 'a')}).null);
  EXPECT_EQ(Model().restore_latency->count(), 1u);
  const Reply none = c_->Call({"PKV.MATCH", root_, "4", TokenBlob({-1, -2, -3, -4})});
  EXPECT_EQ(none.elems[0].integer, 0);  // nothing read of the second match: no restore
  m = Model();
  EXPECT_EQ(m.restore_latency->count(), 1u);
  EXPECT_EQ(m.prefix_tokens->restored_tokens_hot, 4u);
}

}  // namespace
}  // namespace prefixkv
