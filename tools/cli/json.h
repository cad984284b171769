// A minimal JSON writer for --json output: objects, arrays, numbers, strings.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace prefixkv::cli {

class JsonWriter {
 public:
  JsonWriter& BeginObject() {
    Sep();
    out_ += '{';
    first_ = true;
    return *this;
  }
  JsonWriter& EndObject() {
    out_ += '}';
    first_ = false;
    return *this;
  }
  JsonWriter& BeginArray() {
    Sep();
    out_ += '[';
    first_ = true;
    return *this;
  }
  JsonWriter& EndArray() {
    out_ += ']';
    first_ = false;
    return *this;
  }
  JsonWriter& Key(std::string_view k) {
    Sep();
    Quote(k);
    out_ += ':';
    first_ = true;
    return *this;
  }
  JsonWriter& String(std::string_view v) {
    Sep();
    Quote(v);
    return *this;
  }
  JsonWriter& Bool(bool v) {
    Sep();
    out_ += v ? "true" : "false";
    return *this;
  }
  JsonWriter& Int(int64_t v) {
    Sep();
    out_ += std::to_string(v);
    return *this;
  }
  JsonWriter& Uint(uint64_t v) {
    Sep();
    out_ += std::to_string(v);
    return *this;
  }
  JsonWriter& Double(double v) {
    Sep();
    if (!std::isfinite(v)) {
      out_ += "null";
      return *this;
    }
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.6g", v);
    out_ += buf;
    return *this;
  }
  // Shorthands for "key": value.
  JsonWriter& Field(std::string_view k, std::string_view v) { return Key(k).String(v); }
  JsonWriter& Field(std::string_view k, const char* v) { return Key(k).String(v); }
  JsonWriter& Field(std::string_view k, bool v) { return Key(k).Bool(v); }
  JsonWriter& Field(std::string_view k, int v) { return Key(k).Int(v); }
  JsonWriter& Field(std::string_view k, int64_t v) { return Key(k).Int(v); }
  JsonWriter& Field(std::string_view k, uint64_t v) { return Key(k).Uint(v); }
  JsonWriter& Field(std::string_view k, double v) { return Key(k).Double(v); }
  const std::string& str() const { return out_; }

 private:
  void Sep() {
    if (!first_) out_ += ',';
    first_ = false;
  }
  void Quote(std::string_view s) {
    out_ += '"';
    for (char c : s) {
      switch (c) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\t':
          out_ += "\\t";
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out_ += buf;
          } else {
            out_ += c;
          }
      }
    }
    out_ += '"';
  }
  std::string out_;
  bool first_ = true;
};

}  // namespace prefixkv::cli
