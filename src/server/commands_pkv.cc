// Prefix-cache block commands: PKV.REGISTER, PKV.PUT, PKV.GET, PKV.MATCH,
// through the engine's prefix cache. A model is registered first; its blocks
// then live in its own namespace (chain keys rooted in its fingerprint), are
// charged to its own hot-budget owner, and its stores keep its tip lineage
// and supersede rules, exactly as for an embedder calling Engine::Store.
#include <cctype>
#include <cstring>

#include "commands.h"
#include "prefixkv/block_key.h"
#include "prefixkv/codec.h"
#include "prefixkv/namespace_spec.h"

namespace prefixkv::server {
namespace {

// Tokens per block accepted by PKV.REGISTER (the codec's own token limit).
constexpr int64_t kMaxBlockTokens = 1 << 22;

bool ParseKey(CommandContext& ctx, size_t i, BlockKey* key) {
  StatusOr<BlockKey> k = BlockKey::FromHex(ctx.arg(i));
  if (!k.ok()) {
    ctx.out->Error("ERR invalid key: expected 32 lowercase hex digits");
    return false;
  }
  *key = *k;
  return true;
}

// Read as Redis reads an integer argument (ParseRedisInteger): "016" or "+16"
// is not 16.
bool ParseBlockTokens(CommandContext& ctx, size_t i, uint32_t* block_tokens) {
  int64_t n = 0;
  if (!ParseRedisInteger(ctx.arg(i), &n) || n <= 0 || n > kMaxBlockTokens) {
    ctx.out->Error("ERR block_tokens must be an integer in [1, 4194304]");
    return false;
  }
  *block_tokens = static_cast<uint32_t>(n);
  return true;
}

void UnknownNamespace(const BlockKey& root, ReplyBuffer* out) {
  out->Error("ERR unknown namespace " + root.ToHex() + ": PKV.REGISTER it first");
}

// The registered namespace with `root`; false after an error reply.
bool FindNamespace(CommandContext& ctx, const BlockKey& root, Namespace* ns) {
  StatusOr<Namespace> found = ctx.dispatcher.engine()->FindModel(root);
  if (found.ok()) {
    *ns = *found;
    return true;
  }
  if (found.status().IsNotFound()) {
    UnknownNamespace(root, ctx.out);
  } else {
    ReplyStatus(found.status(), ctx.out);
  }
  return false;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// The spec and options of PKV.REGISTER; false after an error reply.
bool ParseRegister(CommandContext& ctx, NamespaceSpec* spec, ModelOptions* options) {
  spec->model = std::string(ctx.arg(1));
  if (!ParseBlockTokens(ctx, 2, &spec->block_tokens)) return false;
  StatusOr<DType> dtype = ParseDType(ctx.arg(3));
  if (!dtype.ok()) {
    ctx.out->Error("ERR invalid dtype: " + dtype.status().message());
    return false;
  }
  spec->dtype = *dtype;
  // Comma-separated cache type names; an empty one is an unknown type.
  for (std::string_view types = ctx.arg(4);;) {
    const size_t comma = types.find(',');
    spec->layer_types.emplace_back(types.substr(0, comma));
    if (comma == std::string_view::npos) break;
    types.remove_prefix(comma + 1);
  }
  for (size_t i = 5; i < ctx.args.size(); ++i) {
    if (EqualsIgnoreCase(ctx.arg(i), "partial_tail")) {
      options->store_partial_tail = true;
      continue;
    }
    const char* field = RegisterKeywordField(ctx.arg(i));
    if (field == nullptr || i + 1 >= ctx.args.size()) {
      ctx.out->Error("ERR syntax error");
      return false;
    }
    if (Status set = SetSpecField(spec, field, ctx.arg(++i)); !set.ok()) {
      ctx.out->Error("ERR invalid model spec: " + set.message());
      return false;
    }
  }
  return true;
}

}  // namespace

// PKV.REGISTER <model> <block_tokens> <dtype> <layer types> [SALT s]
// [REVISION r] [TOKENIZER t] [SHAPES s] [QUANT q] [TP rank/size] [PP rank/size]
// [PARTIAL_TAIL]: the namespace root, as 32 hex digits.
void CmdPkvRegister(CommandContext& ctx) {
  NamespaceSpec spec;
  ModelOptions options;
  if (!ParseRegister(ctx, &spec, &options)) return;
  StatusOr<BlockKey> root = NamespaceRoot(spec);
  if (!root.ok()) {
    return ctx.out->Error("ERR invalid model spec: " + root.status().message());
  }
  Engine* engine = ctx.dispatcher.engine();
  MutexLock lock(&ctx.dispatcher.register_mu());
  const size_t max_models = ctx.dispatcher.config().max_models;
  // Registered already (under its own root or, adopted from before layer
  // shapes were keyed, under another: FindModel by spec finds both).
  if (!engine->FindModel(spec).ok() && engine->model_count() >= max_models) {
    return ctx.out->Error("ERR too many registered models (the limit is " +
                          std::to_string(max_models) + ")");
  }
  StatusOr<Namespace> ns = engine->RegisterModel(spec, options);
  if (!ns.ok()) return ctx.out->Error("ERR " + ns.status().message());
  ctx.out->Bulk(ns->root.ToHex());
}

// PKV.PUT [UNLIKELY] <record> [<record> ...]: one store of a registered
// namespace (see Engine::StoreRecords; UNLIKELY is ReuseHint::kUnlikely: a
// record never equals the word, it starts with the codec's magic); replies
// with what it did.
void CmdPkvPut(CommandContext& ctx) {
  StoreOptions options;
  size_t first = 1;
  if (EqualsIgnoreCase(ctx.arg(1), "unlikely")) {
    options.reuse = ReuseHint::kUnlikely;
    first = 2;
  }
  if (first >= ctx.args.size()) {
    return ctx.out->Error("ERR wrong number of arguments for 'pkv.put' command");
  }
  StatusOr<RecordIdentity> id = PeekBlockIdentity(ctx.arg(first));
  if (!id.ok()) {
    return ctx.out->Error("ERR invalid block record: record 0: " + id.status().message());
  }
  Namespace ns;
  if (!FindNamespace(ctx, id->namespace_id, &ns)) return;
  std::vector<SharedBytes> records;
  records.reserve(ctx.args.size() - first);
  for (size_t i = first; i < ctx.args.size(); ++i) {
    records.push_back(DetachArg(ctx.args[i]));
  }
  StatusOr<StoreResult> r = ctx.dispatcher.engine()->StoreRecords(ns, records, options);
  if (!r.ok()) {
    const Status& s = r.status();
    if (s.IsInvalidArgument() || s.IsCorruption()) {
      return ctx.out->Error("ERR invalid block record: " + s.message());
    }
    return ReplyStatus(s, ctx.out);
  }
  ctx.out->ArrayHeader(16);
  ctx.out->Bulk("blocks");
  ctx.out->Integer(static_cast<int64_t>(r->blocks));
  ctx.out->Bulk("written");
  ctx.out->Integer(static_cast<int64_t>(r->blocks_written));
  ctx.out->Bulk("deduplicated");
  ctx.out->Integer(static_cast<int64_t>(r->blocks_deduplicated));
  ctx.out->Bulk("tip");
  ctx.out->Bulk(r->tip.ToHex());
  ctx.out->Bulk("tip_state_stored");
  ctx.out->Integer(r->tip_state_stored ? 1 : 0);
  ctx.out->Bulk("tip_rewritten");
  ctx.out->Integer(r->tip_rewritten ? 1 : 0);
  ctx.out->Bulk("stripped_tip");
  if (r->stripped_tip.IsZero()) {
    ctx.out->Null();
  } else {
    ctx.out->Bulk(r->stripped_tip.ToHex());
  }
  ctx.out->Bulk("hinted_unlikely");
  ctx.out->Integer(static_cast<int64_t>(r->blocks_hinted_unlikely));
}

// PKV.GET <namespace root> <key>: the block's record, or nil. A block of the
// connection's last PKV.MATCH counts toward its served restore; one of other
// shapes than the spec's is nil, refused with the blocks matched after it.
void CmdPkvGet(CommandContext& ctx) {
  BlockKey root, key;
  if (!ParseKey(ctx, 1, &root) || !ParseKey(ctx, 2, &key)) return;
  Namespace ns;
  if (!FindNamespace(ctx, root, &ns)) return;
  StatusOr<SharedBytes> value =
      ctx.dispatcher.engine()->GetBlock(ns, key, ctx.client->restore.After(ns, key));
  if (value.ok()) {
    ctx.client->restore.OnGet(ctx.dispatcher.engine(), ns, key,
                              ctx.dispatcher.clock()->NowNanos());
    return ctx.out->Bulk(*value);
  }
  if (value.status().IsNotFound()) return ctx.out->Null();
  ReplyStatus(value.status(), ctx.out);
}

// PKV.MATCH <namespace root> <block_tokens> <tokens>: the cached prefix of
// the token sequence, as [count, [key...]].
void CmdPkvMatch(CommandContext& ctx) {
  const uint64_t start_nanos = ctx.dispatcher.clock()->NowNanos();
  BlockKey root;
  if (!ParseKey(ctx, 1, &root)) return;
  uint32_t block_tokens = 0;
  if (!ParseBlockTokens(ctx, 2, &block_tokens)) return;
  const SharedBytes& blob = ctx.args[3];
  if (blob.size() % sizeof(int32_t) != 0) {
    return ctx.out->Error(
        "ERR tokens must be int32 little-endian (length a multiple of 4)");
  }
  Namespace ns;
  if (!FindNamespace(ctx, root, &ns)) return;
  Engine* engine = ctx.dispatcher.engine();
  StatusOr<NamespaceSpec> spec = engine->ModelSpec(ns);
  if (!spec.ok()) return ReplyStatus(spec.status(), ctx.out);
  if (spec->block_tokens != block_tokens) {
    return ctx.out->Error("ERR block_tokens " + std::to_string(block_tokens) +
                          " is not the namespace's " +
                          std::to_string(spec->block_tokens));
  }
  std::vector<int32_t> tokens(blob.size() / sizeof(int32_t));
  if (!tokens.empty()) std::memcpy(tokens.data(), blob.data(), blob.size());
  // The walk stops at the first missing block: the work and the reply are
  // bounded by what is cached, not by the length of the token blob.
  StatusOr<MatchResult> match = engine->Match(ns, tokens);
  if (!match.ok()) return ReplyStatus(match.status(), ctx.out);
  ctx.client->restore.OnMatch(engine, *match, block_tokens, start_nanos);
  ctx.out->ArrayHeader(2);
  ctx.out->Integer(static_cast<int64_t>(match->keys.size()));
  ctx.out->ArrayHeader(match->keys.size());
  for (const BlockKey& key : match->keys) ctx.out->Bulk(key.ToHex());
}

}  // namespace prefixkv::server
