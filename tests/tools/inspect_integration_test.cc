// `prefixkv inspect` over a real data directory: per-namespace blocks and
// bytes, the longest chain past a shorter fork, the decoded tip lineage and
// each namespace's manifest; and `prefixkv explain-miss` over one.
#include <fstream>
#include <string>

#include "prefixkv/advanced/tip_lineage.h"
#include "prefixkv/engine.h"
#include "tests/support/test_util.h"
#include "tests/tools/data_dir_builder.h"
#include "tools/redis/local_redis_cluster.h"

namespace prefixkv {
namespace {

using testing::CliRun;
using testing::DataDirBuilder;
using testing::RunCli;

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class InspectTest : public ::testing::Test {
 protected:
  // The chain, a one-block fork off its second block, and a lineage record
  // saying tip keys[3] extended tip keys[1].
  void SetUp() override {
    data_.StoreChain();
    std::unique_ptr<SsdTier> tier = data_.Open();
    const std::vector<BlockKey>& k = data_.keys();
    const int32_t other[DataDirBuilder::kBlockTokens] = {7};
    fork_ = ChainKey(k[1], other);
    ASSERT_OK(tier->Put(BlockMeta{fork_, k[1], data_.root(), 0},
                        SharedBytes::Copy(std::string_view("fork")), false));
    TipLineage lineage;
    lineage.Record(k[1], BlockKey{}, {k[0], DataDirBuilder::kBlockTokens, false});
    lineage.Record(k[3], k[1], {k[2], DataDirBuilder::kBlockTokens, false});
    const BlockKey record_key = TipLineage::RecordKey(data_.root());
    ASSERT_OK(tier->Put(BlockMeta{record_key, data_.root(), data_.root(), 0},
                        EncodeBlock(lineage.ToRecord(data_.root())).value(), false));
    ASSERT_OK(tier->Close());
  }

  DataDirBuilder data_{testing::TestSeed("InspectTest")};
  BlockKey fork_;
};

TEST_F(InspectTest, JsonShowsNamespaceChainAndLineage) {
  CliRun run = RunCli("inspect --json --data-dir " + data_.dir());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<BlockKey>& k = data_.keys();
  // Four chain blocks, the fork and the lineage record.
  EXPECT_TRUE(Has(run.output, "{\"id\":\"" + data_.root().ToHex() + "\",\"blocks\":6"))
      << run.output;
  EXPECT_TRUE(Has(run.output, "\"longest_chain_blocks\":4,\"longest_chain_tip\":\"" +
                                  k[3].ToHex() + "\""))
      << run.output;
  EXPECT_TRUE(Has(run.output, "\"has_lineage\":true")) << run.output;
  EXPECT_TRUE(Has(run.output, "{\"tip\":\"" + k[1].ToHex() + "\",\"previous\":\"none\""))
      << run.output;
  EXPECT_TRUE(
      Has(run.output, "{\"tip\":\"" + k[3].ToHex() + "\",\"previous\":\"" + k[1].ToHex()))
      << run.output;
  // The raw blob of the zero namespace has no chain and no lineage.
  EXPECT_TRUE(
      Has(run.output, "{\"id\":\"" + BlockKey{}.ToHex() +
                          "\",\"blocks\":1,\"bytes\":8,\"longest_chain_blocks\":0"))
      << run.output;
  EXPECT_TRUE(Has(run.output, "\"hot\":{\"present\":false")) << run.output;
}

TEST_F(InspectTest, HumanOutputNamesTheLongestChainTip) {
  CliRun run = RunCli("inspect --data-dir " + data_.dir());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Has(run.output, "longest chain: 4 blocks, tip " + data_.keys()[3].ToHex()))
      << run.output;
  EXPECT_TRUE(Has(run.output, "lineage: 2 tip(s)")) << run.output;
  EXPECT_TRUE(Has(run.output, "hot tier: not present")) << run.output;
}

TEST(InspectUsageTest, MissingDirectoryIsAUsageError) {
  testing::TempDir tmp;
  CliRun run = RunCli("inspect --data-dir " + (tmp.path() / "absent").string());
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "absent"));
}

// A directory that is no prefixkv data directory (another program's RocksDB
// database, whose CURRENT names a manifest that is not there): inspect and
// audit fail and leave no 8 MiB space reserve in it (a failed open used to
// put "back" a reserve that had never been there).
TEST(InspectUsageTest, AFailedOpenLeavesNoSpaceReserveInAnotherProgramsDirectory) {
  testing::TempDir tmp;
  const std::filesystem::path dir = tmp.path() / "theirs";
  std::filesystem::create_directory(dir);
  std::ofstream(dir / "CURRENT") << "MANIFEST-000001\n";
  for (const std::string command : {"inspect", "audit"}) {
    CliRun run = RunCli(command + " --data-dir " + dir.string());
    EXPECT_EQ(run.exit_code, 1) << command << ": " << run.output;
    EXPECT_FALSE(std::filesystem::exists(dir / "space-reserve")) << command;
  }
}

TEST_F(InspectTest, ANamespaceWrittenBeforeManifestsSaysSo) {
  CliRun run = RunCli("inspect --data-dir " + data_.dir());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Has(run.output, "manifest: none (written before manifests")) << run.output;
  run = RunCli("inspect --json --data-dir " + data_.dir());
  EXPECT_TRUE(Has(run.output, "\"model\":\"\",\"has_manifest\":false")) << run.output;
}

// A data directory an Engine wrote: one namespace with a manifest, one stored
// prompt, and a token file of that prompt.
class ExplainMissCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_.model = "cli-model";
    spec_.block_tokens = 4;
    spec_.dtype = DType::kFloat32;
    spec_.layer_types = {"KVCache"};
    spec_.tokenizer_hash = "abc";
    spec_.layer_shapes = {{.kv_heads = 2, .head_dim = 8}};
    EngineOptions o;
    o.data_dir = data_dir();
    o.hot_capacity_bytes = 1 << 20;
    o.log = [](std::string_view) {};
    std::unique_ptr<Engine> e = Engine::Open(o).value();
    const Namespace ns = e->RegisterModel(spec_).value();
    std::vector<int32_t> tokens = {5, 6, 7, 8, 9, 10, 11, 12, 13};
    ASSERT_OK(e->Store(ns, tokens, {KvLayer(tokens.size())}));
    ASSERT_OK(e->Close());
    WriteTokens("5 6 7 8, 9 10 11 12\n13\n");
  }
  // The one KVCache layer of spec_ (2 x 8) over `tokens` tokens.
  static LayerState KvLayer(size_t tokens) {
    const int64_t n = static_cast<int64_t>(tokens);
    LayerState layer;
    layer.cache_type = "KVCache";
    layer.meta = {std::to_string(n)};
    layer.tensors = {Tensor::Filled(DType::kFloat32, {1, 2, n, 8}, 1),
                     Tensor::Filled(DType::kFloat32, {1, 2, n, 8}, 2)};
    return layer;
  }
  std::string data_dir() const { return tmp_.str() + "/data"; }
  std::string tokens_path() const { return tmp_.str() + "/tokens.txt"; }
  void WriteTokens(const std::string& text) { std::ofstream(tokens_path()) << text; }
  CliRun Explain(const std::string& more) {
    return RunCli("explain-miss --data-dir " + data_dir() + " --tokens " + tokens_path() +
                  " " + more);
  }

  // Explains with `args`: exit 0 and an output that says each of `says`.
  void ExpectExplained(const std::string& args, const std::vector<std::string>& says) {
    const CliRun run = Explain(args);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    for (const std::string& text : says) EXPECT_TRUE(Has(run.output, text)) << run.output;
  }

  testing::TempDir tmp_;
  NamespaceSpec spec_;
};

TEST_F(ExplainMissCliTest, InspectShowsTheManifestByModelName) {
  CliRun run = RunCli("inspect --data-dir " + data_dir());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(
      Has(run.output, NamespaceRoot(spec_).value().ToHex() + " (model cli-model)"))
      << run.output;
  EXPECT_TRUE(Has(run.output, "tokenizer_hash: abc")) << run.output;
  EXPECT_TRUE(Has(run.output, "layer_shapes:   2x8")) << run.output;
  EXPECT_TRUE(Has(run.output, "revision:       unset")) << run.output;
  run = RunCli("inspect --json --data-dir " + data_dir());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Has(run.output, "\"model\":\"cli-model\",\"has_manifest\":true"))
      << run.output;
  EXPECT_TRUE(Has(run.output, "\"fingerprint\":\"" + spec_.Fingerprint().value() + "\""))
      << run.output;
  EXPECT_TRUE(Has(run.output, "\"tokenizer_hash\":\"abc\",\"block_tokens\":\"4\""))
      << run.output;
}

TEST_F(ExplainMissCliTest, TheStoredPromptHitsAndAnotherTokenizerIsNamed) {
  CliRun run = Explain("--model cli-model");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Has(run.output, "none: no miss: every full block (2) is cached"))
      << run.output;
  run = Explain("--model cli-model --tokenizer-hash def");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Has(run.output, "other-namespace: block 0")) << run.output;
  EXPECT_TRUE(Has(run.output, "tokenizer hash differs: stored abc, asked def"))
      << run.output;
  run = Explain("--model cli-model --shapes 2x16 --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Has(run.output, "\"kind\":\"other-namespace\"")) << run.output;
  EXPECT_TRUE(Has(run.output,
                  "{\"field\":\"layer 0 shape\",\"stored\":\"2x8\","
                  "\"asked\":\"2x16\"}"))
      << run.output;
  WriteTokens("[5, 6, 7, 8, 1, 2, 3, 4]");
  run = Explain("--model cli-model --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Has(run.output, "\"kind\":\"never-stored\"")) << run.output;
  EXPECT_TRUE(Has(run.output, "\"first_missed_block\":1")) << run.output;
}

// A block another node stored in a real Redis Cluster: with --remote it is
// in-remote (a Match would fetch it), without it the local cause.
TEST_F(ExplainMissCliTest, WithRemoteABlockOnlyTheClusterHoldsIsInRemote) {
  if (!LocalRedisCluster::Available()) GTEST_SKIP() << "redis-server is not installed";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalRedisCluster> cluster,
                       LocalRedisCluster::Start(LocalRedisClusterOptions{}));
  {
    EngineOptions o;
    o.data_dir = tmp_.str() + "/other-node";
    o.hot_capacity_bytes = 1 << 20;
    o.remote = cluster->uri();
    o.remote_write = RemoteWriteMode::kAlways;
    o.remote_timeout_ms = 1000;
    o.log = [](std::string_view) {};
    std::unique_ptr<Engine> e = Engine::Open(o).value();
    const Namespace ns = e->RegisterModel(spec_).value();
    const std::vector<int32_t> tokens = {5, 6, 7, 8, 9, 10, 11, 12, 20, 21, 22, 23};
    ASSERT_OK(e->Store(ns, tokens, {KvLayer(tokens.size())}));
    ASSERT_OK(e->Flush());
    ASSERT_OK(e->Close());
  }
  WriteTokens("5 6 7 8 9 10 11 12 20 21 22 23");
  ExpectExplained(
      "--model cli-model --json --remote-timeout-ms 1000 --remote " + cluster->uri(),
      {"\"kind\":\"in-remote\"", "\"first_missed_block\":2",
       "\"remote_blocks\":1,\"restorable_with_remote_tokens\":12"});
  ExpectExplained("--model cli-model", {"never-stored: block 2"});
  CliRun run = Explain("--model cli-model --remote-timeout-ms 5");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(Has(run.output, "need --remote")) << run.output;
  cluster->Stop();
}

TEST_F(ExplainMissCliTest, BadInputIsAUsageErrorNamingIt) {
  // Each case: the token file, the arguments, and what the error must say.
  const struct {
    const char* tokens;
    std::string args;
    const char* says;
  } cases[] = {
      {"1 2 x 4", "--model cli-model", "token 2 'x'"},
      {"1 2 99999999999", "--model cli-model", "is not an int32"},
      {" \n", "--model cli-model", "holds no tokens"},
      {"1 2 3 4", "--tokenizer-hash x", "--model is required"},
      {"1 2 3 4", "--model nobody", "no stored namespace of model nobody"},
      {"1 2 3 4", "--model cli-model --shapes 2y8", "layer shape '2y8'"},
      {"1 2 3 4", "--model cli-model --tp 4/4", "outside its size"},
      {"1 2 3 4", "--model cli-model --tp 4", "--tp: spec field tp is malformed: '4'"},
      {"1 2 3 4", "--model m --layers NoSuchCache", "NoSuchCache"},
      {"1 2 3 4", "--model cli-model --tokens " + tmp_.str() + "/absent.txt",
       "cannot read token file"},
      {"1 2 3 4", "--model cli-model --json --data-dir " + tmp_.str() + "/absent",
       "{\"ok\":false"},
  };
  for (const auto& c : cases) {
    WriteTokens(c.tokens);
    CliRun run = Explain(c.args);  // a later --tokens / --data-dir wins
    EXPECT_EQ(run.exit_code, 2) << c.args << ": " << run.output;
    EXPECT_TRUE(Has(run.output, c.says)) << c.args << ": " << run.output;
  }
}

TEST(ExplainMissOldDirectoryTest, ASpecGivenByFlagsExplainsADirectoryWithoutManifests) {
  DataDirBuilder data(testing::TestSeed("ExplainMissOldDirectoryTest"));
  data.StoreChain();
  testing::TempDir tmp;
  std::string text;
  for (int32_t t : data.tokens()) text += std::to_string(t) + " ";
  std::ofstream(tmp.str() + "/tokens") << text;
  const std::string base = "explain-miss --data-dir " + data.dir() + " --tokens " +
                           tmp.str() +
                           "/tokens --model audit-test --layers KVCache "
                           "--block-tokens 16";
  CliRun run = RunCli(base);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Has(run.output, "every full block (4) is cached")) << run.output;
  run = RunCli(base + " --revision r2");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Has(run.output, "namespace " + data.root().ToHex() + " holds 4 leading"))
      << run.output;
  EXPECT_TRUE(Has(run.output, "no manifest (written before manifests)")) << run.output;
}

}  // namespace
}  // namespace prefixkv
