// A small recursive-descent parser for one Mooncake trace line (trace_reader.h):
// a JSON object with timestamp, input and output lengths and hash ids. Written
// by hand because such a line holds only numbers, strings, booleans, null and
// arrays of numbers, which does not warrant a JSON library dependency; it
// accepts exactly that, skips other keys, and reports the first problem with
// its column instead of crashing on bad input.
#include "trace_reader.h"

#include <filesystem>
#include <fstream>
#include <set>

namespace prefixkv::replay {
namespace {

bool IsRequestField(const std::string& key) {
  return key == "timestamp" || key == "input_length" || key == "output_length" ||
         key == "hash_ids";
}

class LineParser {
 public:
  explicit LineParser(std::string_view s) : s_(s) {}

  Status Parse(TraceRequest* out) {
    bool has_input = false, has_ids = false;
    std::set<std::string> fields;  // the request's keys read so far
    Skip();
    PKV_RETURN_IF_ERROR(Expect('{'));
    Skip();
    if (Peek() == '}') return Error("empty object");
    while (true) {
      std::string key;
      const size_t key_at = pos_;
      PKV_RETURN_IF_ERROR(String(&key));
      // A key given twice has no one meaning: "hash_ids" twice was read as
      // both arrays end to end (JSON readers take the last), so the replay
      // counted blocks the request does not have and reported them as hits.
      if (IsRequestField(key) && !fields.insert(key).second) {
        pos_ = key_at;
        return Error("duplicate key \"" + key + "\"");
      }
      Skip();
      PKV_RETURN_IF_ERROR(Expect(':'));
      Skip();
      if (key == "timestamp") {
        PKV_RETURN_IF_ERROR(Number(&out->timestamp_ms));
      } else if (key == "input_length") {
        PKV_RETURN_IF_ERROR(Number(&out->input_length));
        has_input = true;
      } else if (key == "output_length") {
        PKV_RETURN_IF_ERROR(Number(&out->output_length));
      } else if (key == "hash_ids") {
        PKV_RETURN_IF_ERROR(Ids(&out->hash_ids));
        has_ids = true;
      } else {
        PKV_RETURN_IF_ERROR(SkipValue());
      }
      Skip();
      if (Peek() == ',') {
        ++pos_;
        Skip();
        continue;
      }
      PKV_RETURN_IF_ERROR(Expect('}'));
      break;
    }
    Skip();
    if (pos_ != s_.size()) return Error("trailing characters after the object");
    if (!has_input) return Status::InvalidArgument("missing \"input_length\"");
    if (!has_ids) return Status::InvalidArgument("missing \"hash_ids\"");
    return Status::OK();
  }

 private:
  char Peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void Skip() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r'))
      ++pos_;
  }
  Status Error(const std::string& what) const {
    return Status::InvalidArgument("column " + std::to_string(pos_ + 1) + ": " + what);
  }
  Status Expect(char c) {
    if (Peek() != c) return Error(std::string("expected '") + c + "'");
    ++pos_;
    return Status::OK();
  }

  // A string without escapes other than \" and \\ (keys here are plain).
  Status String(std::string* out) {
    PKV_RETURN_IF_ERROR(Expect('"'));
    while (pos_ < s_.size() && s_[pos_] != '"') {
      if (s_[pos_] == '\\') {
        if (++pos_ >= s_.size()) break;
      }
      out->push_back(s_[pos_++]);
    }
    return Expect('"');
  }

  // A non-negative integer; with `allow_fraction` a fraction (as some
  // timestamps have) is accepted and truncated.
  Status Number(uint64_t* out, bool allow_fraction = true) {
    const size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      const uint64_t d = static_cast<uint64_t>(s_[pos_] - '0');
      if (v > (UINT64_MAX - d) / 10) return Error("number out of range");
      v = v * 10 + d;
      ++pos_;
    }
    if (pos_ == start) return Error("expected a non-negative integer");
    if (Peek() == '.') {
      if (!allow_fraction) return Error("expected an integer");
      ++pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    if (Peek() == 'e' || Peek() == 'E') return Error("exponents are not supported");
    *out = v;
    return Status::OK();
  }

  Status Ids(std::vector<uint64_t>* out) {
    PKV_RETURN_IF_ERROR(Expect('['));
    Skip();
    if (Peek() == ']') {
      ++pos_;
      return Status::OK();
    }
    while (true) {
      uint64_t id = 0;
      PKV_RETURN_IF_ERROR(Number(&id, /*allow_fraction=*/false));
      out->push_back(id);
      Skip();
      if (Peek() == ']') {
        ++pos_;
        return Status::OK();
      }
      PKV_RETURN_IF_ERROR(Expect(','));
      Skip();
    }
  }

  Status SkipValue() {
    const char c = Peek();
    if (c == '"') {
      std::string ignored;
      return String(&ignored);
    }
    if (c == '[') {
      std::vector<uint64_t> ignored;
      return Ids(&ignored);
    }
    for (std::string_view word : {"true", "false", "null"}) {
      if (s_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return Status::OK();
      }
    }
    if (c == '-') ++pos_;
    uint64_t ignored = 0;
    return Number(&ignored);
  }

  std::string_view s_;
  size_t pos_ = 0;
};

bool IsBlank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

}  // namespace

StatusOr<TraceRequest> ParseTraceLine(std::string_view line) {
  TraceRequest r;
  PKV_RETURN_IF_ERROR(LineParser(line).Parse(&r));
  return r;
}

StatusOr<std::vector<TraceRequest>> ReadTrace(const std::string& path) {
  // A directory opens as a file here and only fails its first read ("reading
  // DIR failed", exit 1 where a path that cannot be read is a usage error).
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return Status::NotFound("trace " + path + " is a directory, not a file");
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot open trace " + path);
  std::vector<TraceRequest> requests;
  std::string line;
  uint64_t prompt_tokens = 0;
  for (uint64_t n = 1; std::getline(in, line); ++n) {
    if (IsBlank(line)) continue;
    StatusOr<TraceRequest> r = ParseTraceLine(line);
    if (!r.ok()) return r.status().WithContext(path + ":" + std::to_string(n));
    // The replays sum input_length in 64 bits (a hit ratio's denominator): a
    // sum past it (2^64 - 1, a -1 written unsigned) wrapped and reported a
    // token hit ratio above 1 as a result.
    if (r->input_length > UINT64_MAX - prompt_tokens)
      return Status::InvalidArgument("input_length " + std::to_string(r->input_length) +
                                     ": the trace's prompt tokens add up past 2^64 - 1")
          .WithContext(path + ":" + std::to_string(n));
    prompt_tokens += r->input_length;
    requests.push_back(std::move(r).value());
  }
  if (in.bad()) return Status::IOError("reading " + path + " failed");
  // Nothing to replay: every figure would be 0 (replay) or an estimate of
  // nothing (advise), reported as a result with exit 0.
  if (requests.empty())
    return Status::InvalidArgument("trace " + path +
                                   " holds no request (empty, or blank lines only)");
  return requests;
}

}  // namespace prefixkv::replay
