// The cache type registry: every layer cache type name maps to a family, and
// everything that treats layers differently (store, strip, restore,
// compatibility) asks for the family, never compares exact names.
//
// Families (docs/format.md §2.2):
//   kSliceableKV  full-attention KV: every block holds its own token slice
//   kQuantizedKV  quantized full-attention KV: sliceable, with its own meta
//   kRotating     sliding-window state: valid at one position, tip-only
//   kArrays       recurrent/SSM state: tip-only
//   kComposite    a CacheList of sub-caches: handled as tip-only
// An unknown name is an error (NotFound), never a silent default.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/status.h"

namespace prefixkv {

enum class CacheFamily : uint8_t {
  kSliceableKV,
  kQuantizedKV,
  kRotating,
  kArrays,
  kComposite
};

std::string_view CacheFamilyName(CacheFamily family);
// One letter per family, used in namespace layout signatures: K Q R A C.
char CacheFamilyLetter(CacheFamily family);
// True for families whose blocks each carry their own token slice.
bool IsSliceable(CacheFamily family);
// True for families stored only in chain tips (placeholders elsewhere).
bool IsTipOnly(CacheFamily family);

// Thread-safe: lookups and registrations may race.
class CacheTypeRegistry {
 public:
  // The family of `type_name`; NotFound for a name nobody registered.
  static StatusOr<CacheFamily> Lookup(std::string_view type_name);
  // Adds or confirms a name. InvalidArgument when it is already registered with a
  // different family (a name never changes family).
  static Status Register(std::string_view type_name, CacheFamily family);
  // Family predicates; false for unknown names.
  static bool IsRotatingFamily(std::string_view type_name);
  static bool IsArraysFamily(std::string_view type_name);
  static bool IsSliceableFamily(std::string_view type_name);
  // Every registered name, sorted.
  static std::vector<std::string> Names();
};

// Meta state of a rotating layer: (keep, max_size, offset, idx).
//   keep      tokens at the window start that are never rotated out
//   max_size  the window length
//   offset    absolute position: tokens seen so far
//   idx       next write index inside the window buffer
struct RotatingMeta {
  int64_t keep = 0;
  int64_t max_size = 0;
  int64_t offset = 0;
  int64_t idx = 0;

  // Parses four decimal strings. InvalidArgument when there are not exactly four,
  // one is not a non-negative integer, max_size is 0, keep > max_size or
  // idx > max_size.
  static StatusOr<RotatingMeta> Parse(const std::vector<std::string>& meta);
  std::vector<std::string> ToStrings() const;
  // Tokens the window really holds: min(offset, max_size).
  int64_t FilledTokens() const { return offset < max_size ? offset : max_size; }
  bool operator==(const RotatingMeta&) const = default;
};

}  // namespace prefixkv
