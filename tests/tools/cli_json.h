// Reading the `--json` output of the prefixkv CLI in tests: just enough JSON
// for flat objects and arrays of flat objects (no strings holding brackets in
// the parts read).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace prefixkv::testing {

// The text of the JSON value after "key": up to the matching close of an
// object or array, or up to the next ',' / '}' for a scalar.
inline std::string Value(const std::string& json, const std::string& key,
                         size_t from = 0) {
  const size_t k = json.find("\"" + key + "\":", from);
  if (k == std::string::npos) return "";
  size_t i = k + key.size() + 3;
  if (json[i] != '{' && json[i] != '[')
    return json.substr(i, json.find_first_of(",}]", i) - i);
  int depth = 0;
  for (size_t j = i; j < json.size(); ++j) {
    if (json[j] == '{' || json[j] == '[') ++depth;
    if ((json[j] == '}' || json[j] == ']') && --depth == 0)
      return json.substr(i, j - i + 1);
  }
  return "";
}

// The flat objects of a JSON array, as text.
inline std::vector<std::string> Objects(const std::string& array) {
  std::vector<std::string> objects;
  for (size_t b = array.find('{'); b != std::string::npos; b = array.find('{', b + 1)) {
    objects.push_back(array.substr(b, array.find('}', b) - b + 1));
  }
  return objects;
}

// An unsigned count field of `object` (a test failure when missing).
inline uint64_t Count(const std::string& object, const std::string& key) {
  const std::string v = Value(object, key);
  EXPECT_FALSE(v.empty()) << key << " missing in " << object;
  return v.empty() ? 0 : std::stoull(v);
}

}  // namespace prefixkv::testing
