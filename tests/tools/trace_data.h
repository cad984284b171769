// The traces shipped in tests/data, read once per test binary.
#pragma once

#include <string>
#include <vector>

#include "tests/support/test_util.h"
#include "tools/replay/trace_reader.h"

namespace prefixkv::replay::testing_data {

// tests/data/NAME parsed; empty (and a test failure) when it cannot be read.
inline std::vector<TraceRequest>* LoadTrace(const std::string& name) {
  StatusOr<std::vector<TraceRequest>> t =
      ReadTrace(std::string(PREFIXKV_SOURCE_DIR) + "/tests/data/" + name);
  EXPECT_OK(t);
  return new std::vector<TraceRequest>(t.ok() ? std::move(t).value()
                                              : std::vector<TraceRequest>{});
}

inline const std::vector<TraceRequest>& MooncakeTrace() {
  static const std::vector<TraceRequest>* trace =
      LoadTrace("mooncake_synthetic_trace.jsonl");
  return *trace;
}

}  // namespace prefixkv::replay::testing_data
