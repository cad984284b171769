// `prefixkv inspect` over a real data directory: per-namespace blocks and
// bytes, the longest chain past a shorter fork, and the decoded tip lineage.
#include <string>

#include "prefixkv/advanced/tip_lineage.h"
#include "tests/support/test_util.h"
#include "tests/tools/data_dir_builder.h"

namespace prefixkv {
namespace {

using testing::CliRun;
using testing::DataDirBuilder;
using testing::RunCli;

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

  bool Has(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
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

}  // namespace
}  // namespace prefixkv
