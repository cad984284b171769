// `prefixkv explain-miss --data-dir D --model M --tokens FILE`: why a prompt
// does not hit in the data directory of a stopped cache (Engine::ExplainMiss):
// the first block that misses and its cause, or the namespace that holds the
// prompt under another spec and the fields it differs in.
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "prefixkv/namespace_spec.h"
#include "tools/cli/audit_scan.h"
#include "tools/cli/command.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"
#include "tools/cli/remote_flags.h"

namespace prefixkv::cli {
namespace {

constexpr const char* kExplainHelp = R"(
Says why a prompt does not (fully) hit in the data directory of a stopped
prefixkv process. The spec is the stored manifest of --model (the one
namespace of that model name; `prefixkv inspect` lists them), with every
spec flag given replacing its field; with --layers the spec is built from
the flags alone. --tokens names a file of int32 token ids separated by
whitespace or commas (surrounding [ ] allowed).

It prints the first of the prompt's full blocks that misses and the cause:
  none             every full block is cached and restorable (a partial tail
                   after them, the tip of its conversation, included)
  never-stored     no tier holds it and the removal history has no removal of it
  not-stored       never stored or removed before the history's oldest record
  evicted          evicted from the SSD tier for capacity
  removed          removed explicitly (a purge, a repair)
  corrupt-dropped  dropped after its bytes failed verification
  stripped         cached, but its window/recurrent state is a placeholder
  other-namespace  stored under another namespace: the fields that differ
                   ("tokenizer hash differs: stored abc, asked def")
  in-remote        not in the local tiers, but the remote tier (--remote)
                   holds it (or the partial tail after the full blocks): a
                   Match would fetch it
Writes nothing in the data directory (it is opened read-only; a server
cannot open it meanwhile; a damaged block it reads is a miss, left for the
server or `prefixkv audit` to drop) and nothing to the remote tier (it is
only looked up).

Exit codes here: 0 explained (whatever the cause), 1 the tier could not be
read, 2 usage error (bad flags, missing data directory or token file, a bad
token, no or several stored namespaces of --model without --layers).
)";

const std::vector<FlagSpec> kSpecFlags = {
    {"model", "model name (required)", false, ""},
    {"layers", "cache type per layer, comma-separated (else: the stored manifest's)",
     false, ""},
    {"block-tokens", "tokens per block", false, "256 or stored"},
    {"dtype", "cache dtype", false, "float16 or stored"},
    {"revision", "model revision", false, ""},
    {"tokenizer-hash", "the caller's tokenizer hash", false, ""},
    {"shapes", "layer shapes, e.g. 8x128,8x128w4096 ('' for unset)", false, ""},
    {"quantization", "quantization name", false, ""},
    {"tp", "tensor-parallel RANK/SIZE, e.g. 1/4", false, ""},
    {"pp", "pipeline-parallel rank/size", false, ""},
    {"salt", "tenant salt", false, ""},
};

std::vector<FlagSpec> AllFlags() {
  std::vector<FlagSpec> flags = {
      {"data-dir", "data directory of the SSD tier", false, "./prefixkv-data"},
      {"tokens", "file of token ids (required)", false, ""},
      {"json", "print one JSON object", true, ""}};
  flags.insert(flags.end(), kSpecFlags.begin(), kSpecFlags.end());
  for (const FlagSpec& spec : RemoteFlagSpecs()) {
    if (spec.name == "remote" || spec.name == "remote-timeout-ms") flags.push_back(spec);
  }
  return flags;
}

// Token ids from `path`; an error names the bad token and its position.
StatusOr<std::vector<int32_t>> ReadTokens(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read token file " + path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  for (char& c : text) {
    if (c == ',' || c == '[' || c == ']' || c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  std::vector<int32_t> out;
  size_t at = 0;
  while ((at = text.find_first_not_of(' ', at)) != std::string::npos) {
    const size_t end = std::min(text.find(' ', at), text.size());
    int32_t v = 0;
    auto [p, ec] = std::from_chars(text.data() + at, text.data() + end, v);
    if (ec != std::errc() || p != text.data() + end) {
      return Status::InvalidArgument("token " + std::to_string(out.size()) + " '" +
                                     text.substr(at, end - at) + "' in " + path +
                                     " is not an int32");
    }
    out.push_back(v);
    at = end;
  }
  if (out.empty())
    return Status::InvalidArgument("token file " + path + " holds no tokens");
  return out;
}

// The stored manifest of `model`; an error says why there is not exactly one.
StatusOr<NamespaceSpec> StoredSpec(Engine& engine, const std::string& model) {
  PKV_ASSIGN_OR_RETURN(std::vector<StoredManifest> stored, engine.Manifests());
  std::vector<NamespaceSpec> found;
  for (const StoredManifest& m : stored) {
    if (m.decoded.ok() && m.decoded->spec.model == model)
      found.push_back(m.decoded->spec);
  }
  if (found.size() == 1) return found[0];
  return Status::InvalidArgument(
      found.empty() ? "no stored namespace of model " + model +
                          " has a manifest: give --layers (and --block-tokens, --dtype)"
                    : std::to_string(found.size()) + " stored namespaces of model " +
                          model + ": give --layers and the other spec flags to pick one");
}

// Applies every spec flag given to `spec` (through SetSpecField, as a
// manifest field); an error names the flag.
Status ApplyFlags(const Flags& flags, NamespaceSpec* spec) {
  static const std::pair<const char*, const char*> kFields[] = {
      {"layers", "layer_types"},
      {"block-tokens", "block_tokens"},
      {"dtype", "dtype"},
      {"revision", "revision"},
      {"tokenizer-hash", "tokenizer_hash"},
      {"shapes", "layer_shapes"},
      {"quantization", "quantization"},
      {"tp", "tp"},
      {"pp", "pp"},
      {"salt", "salt"}};
  for (const auto& [flag, field] : kFields) {
    if (!flags.Has(flag)) continue;
    if (Status s = SetSpecField(spec, field, flags.GetString(flag)); !s.ok()) {
      return Status::InvalidArgument("--" + std::string(flag) + ": " + s.message());
    }
  }
  return spec->Fingerprint().status();
}

void PrintJson(const MissExplanation& m) {
  JsonWriter j;
  j.BeginObject().Field("ok", true).Field("kind", MissKindName(m.kind));
  j.Field("root", m.root.ToHex()).Field("prompt_tokens", m.prompt_tokens);
  j.Field("full_blocks", m.full_blocks).Field("cached_blocks", m.cached_blocks);
  j.Field("restorable_tokens", m.restorable_tokens);
  j.Field("first_missed_block", m.first_missed_block);
  j.Field("first_missed_key",
          m.first_missed_key.IsZero() ? "" : m.first_missed_key.ToHex());
  j.Field("reason", m.reason);
  j.Field("other_namespace", m.other_root.IsZero() ? "" : m.other_root.ToHex());
  j.Field("other_cached_blocks", m.other_cached_blocks);
  j.Field("other_has_manifest", m.other_has_manifest);
  j.Field("remote_blocks", m.remote_blocks);
  j.Field("restorable_with_remote_tokens", m.restorable_with_remote_tokens);
  j.Key("differences").BeginArray();
  for (const ManifestDifference& d : m.differences) {
    j.BeginObject()
        .Field("field", d.field)
        .Field("stored", d.stored)
        .Field("asked", d.asked);
    j.EndObject();
  }
  j.EndArray().EndObject();
  std::printf("%s\n", j.str().c_str());
}

void PrintHuman(const MissExplanation& m) {
  std::printf(
      "namespace %s: %llu prompt tokens, %llu full blocks, %llu cached, %llu "
      "tokens restorable\n",
      m.root.ToHex().c_str(), static_cast<unsigned long long>(m.prompt_tokens),
      static_cast<unsigned long long>(m.full_blocks),
      static_cast<unsigned long long>(m.cached_blocks),
      static_cast<unsigned long long>(m.restorable_tokens));
  std::printf("%s: %s\n", std::string(MissKindName(m.kind)).c_str(), m.reason.c_str());
  for (const ManifestDifference& d : m.differences) {
    std::printf("  %s\n", d.ToString().c_str());
  }
}

int ExplainMiss(const std::vector<std::string>& args) {
  Flags flags(
      "prefixkv explain-miss --model M --tokens FILE [--data-dir D] [spec flags] "
      "[--remote URI [--remote-timeout-ms MS]] [--json]",
      AllFlags());
  std::string error;
  if (!flags.Parse(args, &error)) return UsageError(flags, error);
  if (flags.help_requested()) {
    std::printf("%s%s", flags.HelpText().c_str(), kExplainHelp);
    return 0;
  }
  if (!flags.Has("model") || flags.GetString("model").empty())
    return UsageError(flags, "--model is required");
  if (!flags.Has("tokens")) return UsageError(flags, "--tokens is required");
  StatusOr<std::vector<int32_t>> tokens = ReadTokens(flags.GetString("tokens"));
  if (!tokens.ok()) return UsageError(flags, tokens.status().message());
  const std::string dir = flags.GetString("data-dir", "./prefixkv-data");
  EngineOptions remote;
  if (std::string bad = ApplyRemoteFlags(flags, &remote); !bad.empty())
    return UsageError(flags, bad);
  std::vector<std::string> log;
  StatusOr<std::unique_ptr<Engine>> engine =
      OpenExistingEngine(dir, &log, DirAccess::kReadOnly, &remote);
  if (!engine.ok()) return OpenError(flags, "explain-miss", engine.status());
  NamespaceSpec spec;
  spec.model = flags.GetString("model");
  if (!flags.Has("layers")) {
    StatusOr<NamespaceSpec> stored = StoredSpec(**engine, spec.model);
    if (!stored.ok()) return UsageError(flags, stored.status().message());
    spec = std::move(stored).value();
  }
  if (Status s = ApplyFlags(flags, &spec); !s.ok()) return UsageError(flags, s.message());
  StatusOr<MissExplanation> m = (*engine)->ExplainMiss(spec, *tokens);
  if (!m.ok()) return Failure(flags, "explain-miss", m.status().ToString());
  if (Status s = (*engine)->Close(); !s.ok())
    return Failure(flags, "explain-miss", s.ToString());
  flags.GetBool("json") ? PrintJson(*m) : PrintHuman(*m);
  return kExitOk;
}

}  // namespace
}  // namespace prefixkv::cli

PKV_REGISTER_COMMAND("explain-miss",
                     "say why a prompt misses: the first missing block and its cause",
                     prefixkv::cli::ExplainMiss);
