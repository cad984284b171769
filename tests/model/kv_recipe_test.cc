// KvCacheRecipe: owned layers, alias canonicalization, bytes per token, fail-closed
// architectures, and recipes derived from shards.
#include "prefixkv/kv_recipe.h"

#include <gtest/gtest.h>

#include "prefixkv/reference_model.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

KvRecipeSpec Spec(std::string arch, int start, int end, DType dtype = DType::kFloat32) {
  return KvRecipeSpec{std::move(arch), dtype, 4, 8, 6, start, end, {}};
}

KvCacheRecipe Make(KvRecipeSpec spec) {
  auto recipe = KvCacheRecipe::Make(std::move(spec));
  EXPECT_OK(recipe);
  return *recipe;
}

TEST(KvRecipe, RecipeOwnedLayersAndFingerprintAliasing) {
  KvCacheRecipe recipe = Make(Spec("LlamaForCausalLM", 2, 3));
  EXPECT_EQ(recipe.owned_layers(), (std::vector<int>{2, 3}));
  EXPECT_EQ(recipe.architecture_adapter(), "dense-llama");
  KvCacheRecipe alias = Make(Spec("llama", 2, 3));
  EXPECT_TRUE(recipe.is_compatible(alias));
  EXPECT_EQ(recipe.fingerprint(), alias.fingerprint());
  // A different owned range is not compatible.
  KvCacheRecipe other = Make(Spec("llama", 0, 1));
  EXPECT_FALSE(recipe.is_compatible(other));
  // Nor is a different KV dtype.
  EXPECT_FALSE(recipe.is_compatible(Make(Spec("llama", 2, 3, DType::kFloat16))));
}

TEST(KvRecipe, RecipeBytesPerTokenScalesWithOwnedLayers) {
  KvCacheRecipe one = Make(Spec("dense-llama", 0, 0));
  KvCacheRecipe two = Make(Spec("dense-llama", 0, 1));
  // 2 (k+v) * heads * dim * 4 bytes per layer.
  EXPECT_EQ(one.bytes_per_token(), 2u * 4 * 8 * 4);
  EXPECT_EQ(two.bytes_per_token(), 2 * one.bytes_per_token());
  EXPECT_EQ(Make(Spec("dense-llama", 0, 0, DType::kFloat16)).bytes_per_token(),
            2u * 4 * 8 * 2);
}

TEST(KvRecipe, UncertifiedArchitectureRecipeFailsClosed) {
  auto moe = KvCacheRecipe::Make(Spec("qwen3-moe", 0, 5));
  ASSERT_FALSE(moe.ok());
  EXPECT_EQ(moe.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(moe.status().message().find("uncertified architecture"), std::string::npos);
  // Unknown names fail closed too; there is no default architecture.
  EXPECT_EQ(KvCacheRecipe::Make(Spec("", 0, 5)).status().code(),
            StatusCode::kNotSupported);
  EXPECT_EQ(KvCacheRecipe::Make(Spec("mistral", 0, 5)).status().code(),
            StatusCode::kNotSupported);
}

TEST(KvRecipe, RejectsOwnedRangesOutsideTheModel) {
  EXPECT_TRUE(KvCacheRecipe::Make(Spec("llama", 3, 2)).status().IsInvalidArgument());
  EXPECT_TRUE(KvCacheRecipe::Make(Spec("llama", 0, 6)).status().IsInvalidArgument());
  EXPECT_TRUE(KvCacheRecipe::Make(Spec("llama", -1, 2)).status().IsInvalidArgument());
  KvRecipeSpec windows = Spec("llama", 0, 5);
  windows.layer_window_tokens = {4, 4, 4};  // not one per layer
  EXPECT_TRUE(KvCacheRecipe::Make(windows).status().IsInvalidArgument());
}

TEST(KvRecipe, RecipeOfAShardCarriesItsGeometryAndWindows) {
  ModelConfig config;
  config.n_layers = 8;
  config.n_kv_heads = 2;
  config.sliding_window_tokens = 5;
  config.global_layer_every = 4;
  auto model = ReferenceModel::Create(config);
  ASSERT_OK(model);
  auto shard = ReferenceShard::Create(*model, 2, 4);
  ASSERT_OK(shard);
  auto recipe = KvRecipeFor(**shard);
  ASSERT_OK(recipe);
  EXPECT_EQ(recipe->n_kv_heads(), 2);
  EXPECT_EQ(recipe->head_dim(), 8);
  EXPECT_EQ(recipe->owned_layers(), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(recipe->layer_window_tokens(2), 5);
  EXPECT_EQ(recipe->layer_window_tokens(3), 0);  // every 4th layer is global
  EXPECT_NE(recipe->fingerprint().find("windows=5,0,5"), std::string::npos);
}

// The recipe of a whole 4-layer model with window 5 and these layer kinds.
StatusOr<KvCacheRecipe> WholeModelRecipe(const std::string& kinds) {
  ModelConfig config;
  config.n_layers = 4;
  config.sliding_window_tokens = 5;
  config.layer_kinds = kinds;
  PKV_ASSIGN_OR_RETURN(auto model, ReferenceModel::Create(config));
  PKV_ASSIGN_OR_RETURN(auto shard, ReferenceShard::Create(model, 0, 3));
  return KvRecipeFor(*shard);
}

TEST(KvRecipe, RecipeOfAHybridShardNamesItsRecurrentLayers) {
  auto recipe = WholeModelRecipe("GRWR");
  ASSERT_OK(recipe);
  EXPECT_TRUE(recipe->layer_geometry(1).recurrent.is_recurrent());
  EXPECT_FALSE(recipe->layer_geometry(2).recurrent.is_recurrent());
  EXPECT_EQ(recipe->layer_window_tokens(2), 5);
  EXPECT_NE(
      recipe->fingerprint().find("|windows=0,0,5,0|recurrent=-,3x32:4x8,-,3x32:4x8"),
      std::string::npos)
      << recipe->fingerprint();
  // The same shapes with attention in place of the recurrent layers differ.
  auto attention_recipe = WholeModelRecipe("GGWG");
  ASSERT_OK(attention_recipe);
  EXPECT_FALSE(recipe->is_compatible(*attention_recipe));
  KvRecipeSpec bad = Spec("llama", 0, 5);
  bad.layer_recurrent = {RecurrentShape{3, 32, 0, 8}, {}, {}, {}, {}, {}};
  EXPECT_TRUE(KvCacheRecipe::Make(bad).status().IsInvalidArgument());
}

}  // namespace
}  // namespace prefixkv
