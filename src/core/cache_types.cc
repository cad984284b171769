// The cache type registry (namespace_spec.h, part 1): the built-in layer cache type
// names, each mapped to a family, and the process-wide registry behind them (guarded by a
// mutex: Register may run while stores look names up; never destroyed, so it is usable at
// exit). Store, strip, restore and the compatibility checks ask for the family, never
// compare names, so a new cache type is one Register call; an unknown name is NotFound,
// never a default. Also RotatingMeta, the parsed meta of a sliding-window layer.
#include <algorithm>
#include <charconv>
#include <map>

#include "prefixkv/advanced/mutex.h"
#include "prefixkv/namespace_spec.h"

namespace prefixkv {
namespace {

struct Registry {
  Mutex mu;
  std::map<std::string, CacheFamily, std::less<>> families GUARDED_BY(mu);

  Registry() {
    const std::pair<const char*, CacheFamily> builtin[] = {
        {"KVCache", CacheFamily::kSliceableKV},
        {"BatchKVCache", CacheFamily::kSliceableKV},
        {"ConcatenateKVCache", CacheFamily::kSliceableKV},
        {"QuantizedKVCache", CacheFamily::kQuantizedKV},
        {"TurboQuantKVCache", CacheFamily::kQuantizedKV},
        {"RotatingKVCache", CacheFamily::kRotating},
        {"PrefillReadyRotatingKVCache", CacheFamily::kRotating},
        {"BufferedRotatingKVCache", CacheFamily::kRotating},
        {"BatchRotatingKVCache", CacheFamily::kRotating},
        {"ArraysCache", CacheFamily::kArrays},
        {"MambaCache", CacheFamily::kArrays},
        {"SizedArraysCache", CacheFamily::kArrays},
        {"CacheList", CacheFamily::kComposite},
    };
    for (const auto& [name, family] : builtin) families.emplace(name, family);
  }
};

Registry& GetRegistry() {
  static Registry* r = new Registry();  // never destroyed: usable at exit
  return *r;
}

bool IsFamily(std::string_view name, CacheFamily want) {
  StatusOr<CacheFamily> f = CacheTypeRegistry::Lookup(name);
  return f.ok() && *f == want;
}

}  // namespace

std::string_view CacheFamilyName(CacheFamily family) {
  switch (family) {
    case CacheFamily::kSliceableKV:
      return "sliceable-kv";
    case CacheFamily::kQuantizedKV:
      return "quantized-kv";
    case CacheFamily::kRotating:
      return "rotating";
    case CacheFamily::kArrays:
      return "arrays";
    case CacheFamily::kComposite:
      return "composite";
  }
  return "invalid";
}

char CacheFamilyLetter(CacheFamily family) {
  switch (family) {
    case CacheFamily::kSliceableKV:
      return 'K';
    case CacheFamily::kQuantizedKV:
      return 'Q';
    case CacheFamily::kRotating:
      return 'R';
    case CacheFamily::kArrays:
      return 'A';
    case CacheFamily::kComposite:
      return 'C';
  }
  return '?';
}

bool IsSliceable(CacheFamily f) {
  return f == CacheFamily::kSliceableKV || f == CacheFamily::kQuantizedKV;
}
bool IsTipOnly(CacheFamily f) { return !IsSliceable(f); }

StatusOr<CacheFamily> CacheTypeRegistry::Lookup(std::string_view name) {
  Registry& r = GetRegistry();
  MutexLock lock(&r.mu);
  auto it = r.families.find(name);
  if (it == r.families.end()) {
    return Status::NotFound("unknown cache type '" + std::string(name) + "'");
  }
  return it->second;
}

Status CacheTypeRegistry::Register(std::string_view name, CacheFamily family) {
  if (name.empty()) return Status::InvalidArgument("empty cache type name");
  Registry& r = GetRegistry();
  MutexLock lock(&r.mu);
  auto [it, inserted] = r.families.emplace(std::string(name), family);
  if (!inserted && it->second != family) {
    return Status::InvalidArgument("cache type '" + std::string(name) +
                                   "' is already registered as " +
                                   std::string(CacheFamilyName(it->second)));
  }
  return Status::OK();
}

bool CacheTypeRegistry::IsRotatingFamily(std::string_view n) {
  return IsFamily(n, CacheFamily::kRotating);
}
bool CacheTypeRegistry::IsArraysFamily(std::string_view n) {
  return IsFamily(n, CacheFamily::kArrays);
}
bool CacheTypeRegistry::IsSliceableFamily(std::string_view n) {
  StatusOr<CacheFamily> f = Lookup(n);
  return f.ok() && IsSliceable(*f);
}

std::vector<std::string> CacheTypeRegistry::Names() {
  Registry& r = GetRegistry();
  MutexLock lock(&r.mu);
  std::vector<std::string> out;
  for (const auto& [name, family] : r.families) out.push_back(name);
  return out;
}

StatusOr<RotatingMeta> RotatingMeta::Parse(const std::vector<std::string>& meta) {
  if (meta.size() != 4) {
    return Status::InvalidArgument(
        "rotating meta needs (keep, max_size, offset, idx), got " +
        std::to_string(meta.size()) + " values");
  }
  int64_t v[4];
  for (int i = 0; i < 4; ++i) {
    const std::string& s = meta[i];
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v[i]);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty() || v[i] < 0) {
      return Status::InvalidArgument("rotating meta value '" + s + "' is not a count");
    }
  }
  RotatingMeta m{v[0], v[1], v[2], v[3]};
  if (m.max_size == 0) return Status::InvalidArgument("rotating window max_size is 0");
  if (m.keep > m.max_size) return Status::InvalidArgument("rotating keep > max_size");
  if (m.idx > m.max_size) return Status::InvalidArgument("rotating idx > max_size");
  return m;
}

std::vector<std::string> RotatingMeta::ToStrings() const {
  return {std::to_string(keep), std::to_string(max_size), std::to_string(offset),
          std::to_string(idx)};
}

}  // namespace prefixkv
