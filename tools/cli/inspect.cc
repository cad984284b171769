// `prefixkv inspect --data-dir D [--json]`: what a stopped cache left in its
// data directory: the SSD tier's size, each namespace's blocks and bytes, its
// manifest (the spec it was registered with), its longest chain, and its
// recorded tip lineage.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "prefixkv/advanced/engine_internals.h"
#include "prefixkv/advanced/tip_lineage.h"
#include "prefixkv/codec.h"
#include "prefixkv/namespace_spec.h"
#include "tools/cli/audit_scan.h"
#include "tools/cli/command.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"

namespace prefixkv::cli {
namespace {

constexpr const char* kInspectHelp = R"(
Describes the SSD tier in the data directory of a stopped prefixkv process:
its block and byte counters, then per namespace (chain root, hex; the zero
namespace holds raw blobs of the server's GET/SET) the stored blocks and
payload bytes, its manifest (model, revision, tokenizer hash, block tokens,
dtype, layer types and shapes, quantization, tensor/pipeline-parallel
rank/size, salt: what registered it; "none" for a namespace last registered
before manifests existed), the longest parent-linked chain, and the recorded
tips of the tip lineage (decoded from the namespace's lineage record, when
present). A namespace with a manifest and no blocks is listed too.
There is no hot tier to show: it lives only in a running process.
Writes nothing in the data directory (it is opened read-only; a server
cannot open it meanwhile). Reads only the lineage records.

Exit codes here: 0 printed, 1 the tier could not be read, 2 usage error (bad flags,
missing data directory).
)";

constexpr const char* kNoHotTier =
    "not present (the hot tier lives only in a running process)";

struct LineageTip {
  BlockKey tip, previous;
  TipPlace place;
  bool stored = false;
};

struct NamespaceView {
  SsdNamespaceUsage usage;
  std::optional<StoredManifest> manifest;  // none: written before manifests
  ChainSummary longest;
  bool has_lineage = false;
  std::string lineage_error;     // non-empty: the record exists but is unreadable
  std::vector<LineageTip> tips;  // oldest first
};

void ReadLineage(SsdTier& tier, NamespaceView* view) {
  const BlockKey root = view->usage.namespace_id;
  const BlockKey record_key = TipLineage::RecordKey(root);
  if (!tier.Contains(record_key)) return;
  view->has_lineage = true;
  StatusOr<SharedBytes> payload = tier.Get(record_key);
  StatusOr<BlockRecord> rec =
      payload.ok() ? DecodeBlock(*payload) : StatusOr<BlockRecord>(payload.status());
  StatusOr<TipLineage> lineage =
      rec.ok() ? TipLineage::FromRecord(*rec, root) : StatusOr<TipLineage>(rec.status());
  if (!lineage.ok()) {
    view->lineage_error = lineage.status().ToString();
    return;
  }
  std::map<BlockKey, TipPlace> places;
  lineage->ForEachTip(
      [&](const BlockKey& tip, const TipPlace& place) { places[tip] = place; });
  for (const auto& [tip, previous] : lineage->Entries()) {
    view->tips.push_back({tip, previous, places[tip], tier.Contains(tip)});
  }
}

std::vector<NamespaceView> Collect(SsdTier& tier, std::vector<StoredManifest> manifests) {
  const std::map<BlockKey, ChainSummary> chains = LongestChains(Inventory(tier));
  std::vector<SsdNamespaceUsage> usages = tier.Namespaces();
  for (const StoredManifest& m : manifests) {  // registered, nothing stored yet
    const auto same = [&](const SsdNamespaceUsage& u) {
      return u.namespace_id == m.root;
    };
    if (std::none_of(usages.begin(), usages.end(), same))
      usages.push_back({m.root, 0, 0});
  }
  std::vector<NamespaceView> views;
  for (const SsdNamespaceUsage& usage : usages) {
    NamespaceView view;
    view.usage = usage;
    for (StoredManifest& m : manifests) {
      if (m.root == usage.namespace_id) view.manifest = std::move(m);
    }
    if (auto it = chains.find(usage.namespace_id); it != chains.end()) {
      view.longest = it->second;
    }
    if (!usage.namespace_id.IsZero()) ReadLineage(tier, &view);
    views.push_back(std::move(view));
  }
  return views;
}

std::string KeyOrNone(const BlockKey& key) { return key.IsZero() ? "none" : key.ToHex(); }

// The model name a namespace is shown by ("" without a readable manifest).
std::string ModelName(const NamespaceView& v) {
  return v.manifest && v.manifest->decoded.ok() ? v.manifest->decoded->spec.model : "";
}

void ManifestJson(const NamespaceView& v, JsonWriter& j) {
  j.Field("model", ModelName(v)).Field("has_manifest", v.manifest.has_value());
  const bool readable = v.manifest && v.manifest->decoded.ok();
  j.Field("manifest_error",
          v.manifest && !readable ? v.manifest->decoded.status().ToString() : "");
  j.Key("manifest").BeginObject();
  if (readable) {
    j.Field("fingerprint", v.manifest->decoded->fingerprint);
    for (const auto& [name, value] : ManifestFields(v.manifest->decoded->spec)) {
      j.Field(name, value);
    }
  }
  j.EndObject();
}

void ManifestHuman(const NamespaceView& v) {
  if (v.usage.namespace_id.IsZero()) return;
  if (!v.manifest) {
    std::printf(
        "  manifest: none (written before manifests; registering the model writes it)\n");
  } else if (!v.manifest->decoded.ok()) {
    std::printf("  manifest: unreadable (%s)\n",
                v.manifest->decoded.status().ToString().c_str());
  } else {
    std::printf("  manifest:\n");
    for (const auto& [name, value] : ManifestFields(v.manifest->decoded->spec)) {
      std::printf("    %-15s %s\n", (name + ":").c_str(),
                  value.empty() ? "unset" : value.c_str());
    }
  }
}

void PrintJson(const std::string& dir, const TierCounters& ssd,
               const std::vector<NamespaceView>& views) {
  JsonWriter j;
  j.BeginObject().Field("data_dir", dir).Key("tiers").BeginObject();
  j.Key("hot")
      .BeginObject()
      .Field("present", false)
      .Field("note", kNoHotTier)
      .EndObject();
  j.Key("ssd").BeginObject().Field("blocks", ssd.entries).Field("bytes", ssd.bytes);
  j.EndObject().EndObject().Key("namespaces").BeginArray();
  for (const NamespaceView& v : views) {
    j.BeginObject().Field("id", v.usage.namespace_id.ToHex());
    j.Field("blocks", v.usage.blocks).Field("bytes", v.usage.bytes);
    j.Field("longest_chain_blocks", v.longest.blocks);
    j.Field("longest_chain_tip", KeyOrNone(v.longest.tip));
    j.Field("has_lineage", v.has_lineage).Field("lineage_error", v.lineage_error);
    j.Key("lineage_tips").BeginArray();
    for (const LineageTip& t : v.tips) {
      j.BeginObject()
          .Field("tip", t.tip.ToHex())
          .Field("previous", KeyOrNone(t.previous));
      j.Field("parent", t.place.parent.ToHex());
      j.Field("token_count", uint64_t{t.place.token_count});
      j.Field("partial", t.place.partial).Field("stored", t.stored).EndObject();
    }
    j.EndArray();
    ManifestJson(v, j);
    j.EndObject();
  }
  j.EndArray().EndObject();
  std::printf("%s\n", j.str().c_str());
}

void PrintHuman(const std::string& dir, const TierCounters& ssd,
                const std::vector<NamespaceView>& views) {
  std::printf("prefixkv inspect %s\n", dir.c_str());
  std::printf("  hot tier: %s\n", kNoHotTier);
  std::printf("  ssd tier: %llu blocks, %llu bytes\n",
              static_cast<unsigned long long>(ssd.entries),
              static_cast<unsigned long long>(ssd.bytes));
  for (const NamespaceView& v : views) {
    const std::string name = ModelName(v);
    const std::string label = v.usage.namespace_id.IsZero() ? " (raw blobs)"
                              : name.empty()                ? ""
                                                            : " (model " + name + ")";
    std::printf("namespace %s%s: %llu blocks, %llu bytes\n",
                v.usage.namespace_id.ToHex().c_str(), label.c_str(),
                static_cast<unsigned long long>(v.usage.blocks),
                static_cast<unsigned long long>(v.usage.bytes));
    ManifestHuman(v);
    if (v.longest.blocks > 0) {
      std::printf("  longest chain: %llu blocks, tip %s\n",
                  static_cast<unsigned long long>(v.longest.blocks),
                  v.longest.tip.ToHex().c_str());
    }
    if (!v.lineage_error.empty()) {
      std::printf("  lineage: unreadable (%s)\n", v.lineage_error.c_str());
    } else if (v.has_lineage) {
      std::printf("  lineage: %zu tip(s), oldest first\n", v.tips.size());
    }
    for (const LineageTip& t : v.tips) {
      std::printf("    tip %s: %u tokens%s, extends %s%s\n", t.tip.ToHex().c_str(),
                  t.place.token_count, t.place.partial ? " (partial)" : "",
                  KeyOrNone(t.previous).c_str(), t.stored ? "" : " [not stored]");
    }
  }
}

int Inspect(const std::vector<std::string>& args) {
  Flags flags("prefixkv inspect [--data-dir D] [--json]",
              {{"data-dir", "data directory of the SSD tier", false, "./prefixkv-data"},
               {"json", "print one JSON object", true, ""}});
  std::string error;
  if (!flags.Parse(args, &error)) return UsageError(flags, error);
  if (flags.help_requested()) {
    std::printf("%s%s", flags.HelpText().c_str(), kInspectHelp);
    return 0;
  }
  const std::string dir = flags.GetString("data-dir", "./prefixkv-data");
  std::vector<std::string> log;
  StatusOr<std::unique_ptr<Engine>> engine = OpenExistingEngine(dir, &log);
  if (!engine.ok()) return OpenError(flags, "inspect", engine.status());
  StatusOr<std::vector<StoredManifest>> manifests = (*engine)->Manifests();
  if (!manifests.ok()) return Failure(flags, "inspect", manifests.status().ToString());
  const std::vector<NamespaceView> views =
      Collect(*EngineSsdTier(**engine), std::move(manifests).value());
  const TierCounters ssd = (*engine)->Stats().ssd;
  if (Status s = (*engine)->Close(); !s.ok())
    return Failure(flags, "inspect", s.ToString());
  flags.GetBool("json") ? PrintJson(dir, ssd, views) : PrintHuman(dir, ssd, views);
  return kExitOk;
}

}  // namespace
}  // namespace prefixkv::cli

PKV_REGISTER_COMMAND("inspect",
                     "describe a data directory: namespaces, chains, lineage tips",
                     prefixkv::cli::Inspect);
