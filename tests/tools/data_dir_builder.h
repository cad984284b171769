// Test support for the data-directory tools (`prefixkv audit`, `inspect`): a
// small SSD tier holding one chain of real encoded block records, and a way
// to run the built CLI and capture its exit code and output.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "prefixkv/advanced/ssd_tier.h"
#include "prefixkv/block_key.h"
#include "prefixkv/codec.h"
#include "prefixkv/namespace_spec.h"
#include "tests/support/test_util.h"

namespace prefixkv::testing {

struct CliRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr together (RunCli), or stdout only
  std::string errors;  // RunCliSplit only: stderr
};

inline std::string ReadAll(FILE* f) {
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), n);
  return out;
}

// Runs `prefixkv ARGS` (the binary the build made) and waits for it.
// `redirect` is the shell redirection of its stderr.
// `binary` replaces the built prefixkv (a copy elsewhere, for instance).
inline CliRun RunCliWith(const std::string& args, const std::string& redirect,
                         const std::string& binary = PREFIXKV_CLI) {
  CliRun run;
  const std::string command = binary + " " + args + " " + redirect;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  run.output = ReadAll(pipe);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

inline CliRun RunCli(const std::string& args) { return RunCliWith(args, "2>&1"); }

// As RunCli, with stdout in `output` and stderr in `errors`.
inline CliRun RunCliSplit(const std::string& args) {
  TempDir tmp;
  const std::string errors_path = tmp.str() + "/stderr";
  CliRun run = RunCliWith(args, "2>" + errors_path);
  if (FILE* f = std::fopen(errors_path.c_str(), "r")) {
    run.errors = ReadAll(f);
    std::fclose(f);
  }
  return run;
}

// Every file and directory under `dir` (relative path) with what a change
// to it would show: its size, modification time, inode and (for a file) its
// bytes. Two snapshots are equal only if nothing under `dir` was written,
// created, removed or replaced in between.
inline std::map<std::string, std::string> SnapshotOf(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) != 0) continue;
    std::string state = "size " + std::to_string(st.st_size) + " mtime " +
                        std::to_string(st.st_mtim.tv_sec) + "." +
                        std::to_string(st.st_mtim.tv_nsec) + " inode " +
                        std::to_string(st.st_ino);
    if (S_ISREG(st.st_mode)) {
      std::ifstream in(e.path(), std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), {});
      state += " bytes " + std::to_string(std::hash<std::string>{}(bytes));
    }
    files[std::filesystem::relative(e.path(), dir).string()] = state;
  }
  return files;
}

// What differs between two SnapshotOf results, one line per path ("" when
// nothing does).
inline std::string ChangesBetween(const std::map<std::string, std::string>& before,
                                  const std::map<std::string, std::string>& after) {
  std::string changes;
  for (const auto& [path, state] : before) {
    auto it = after.find(path);
    if (it == after.end()) {
      changes += "removed " + path + "\n";
    } else if (it->second != state) {
      changes += "changed " + path + ": " + state + " -> " + it->second + "\n";
    }
  }
  for (const auto& [path, state] : after) {
    if (before.count(path) == 0) changes += "added " + path + ": " + state + "\n";
  }
  return changes;
}

// One namespace (a KVCache-only model, 16-token blocks) whose first
// kChainBlocks blocks are stored as real records: keys from ChainKeys, each
// record's tensors random (4 KiB each, so payloads go to blob files).
class DataDirBuilder {
 public:
  static constexpr uint32_t kBlockTokens = 16;
  static constexpr size_t kChainBlocks = 4;

  explicit DataDirBuilder(uint64_t seed) : rng_(seed) {
    spec_.model = "audit-test";
    spec_.block_tokens = kBlockTokens;
    spec_.layer_types = {"KVCache"};
    root_ = NamespaceRoot(spec_).value();
    for (size_t i = 0; i < kChainBlocks * kBlockTokens; ++i) {
      tokens_.push_back(static_cast<int32_t>(rng_() % 32000));
    }
    keys_ = ChainKeys(root_, tokens_, kBlockTokens);
  }

  std::string dir() const { return dir_.str() + "/data"; }
  const NamespaceSpec& spec() const { return spec_; }
  const BlockKey& root() const { return root_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<BlockKey>& keys() const { return keys_; }
  // The first bytes of block i's key tensor: random, so they occur on disk
  // only where that block's payload is stored.
  const std::string& pattern(size_t i) const { return patterns_[i]; }

  // A flush-mode tier (no write-ahead log: every payload byte is in one file).
  std::unique_ptr<SsdTier> Open() const {
    SsdTierOptions options;
    options.path = dir();
    options.durability = SsdDurability::kFlush;
    options.log = [](std::string_view) {};
    return SsdTier::Open(options).value();
  }

  // The record of chain block i, as EncodeBlock writes it.
  SharedBytes Encode(size_t i) {
    BlockRecord rec;
    rec.key = keys_[i];
    rec.parent = i == 0 ? root_ : keys_[i - 1];
    rec.namespace_id = root_;
    rec.token_count = kBlockTokens;
    rec.tokens.assign(tokens_.begin() + i * kBlockTokens,
                      tokens_.begin() + (i + 1) * kBlockTokens);
    LayerState layer;
    layer.cache_type = "KVCache";
    layer.tensors = {RandomTensor(rng_, DType::kFloat16, {1, 2, kBlockTokens, 64}),
                     RandomTensor(rng_, DType::kFloat16, {1, 2, kBlockTokens, 64})};
    patterns_.resize(std::max(patterns_.size(), i + 1));
    patterns_[i] = std::string(layer.tensors[0].bytes().view().substr(0, 64));
    rec.layers.push_back(std::move(layer));
    return EncodeBlock(rec).value();
  }

  // Stores the whole chain, plus one raw blob (zero namespace, as the
  // server's SET writes), and closes the tier.
  //
  // The raw blob's payload record sorts before every chain payload. Known
  // storage bug (reported): the tier's metadata scans at Open and in Audit
  // run without an upper bound, so their iterator steps onto the first payload
  // record and loads it; if that one blob is damaged, Open fails and moves the
  // whole database aside. With the blob first, damaging a chain payload
  // exercises the per-block detection these tests are about.
  void StoreChain() {
    std::unique_ptr<SsdTier> tier = Open();
    ASSERT_OK(tier->Put(BlockMeta{BlockKey{0, 1}, {}, {}, 0},
                        SharedBytes::Copy(std::string_view("raw blob")), false));
    for (size_t i = 0; i < kChainBlocks; ++i) {
      BlockMeta meta{keys_[i], i == 0 ? root_ : keys_[i - 1], root_, 0};
      ASSERT_OK(tier->Put(meta, Encode(i), /*dirty=*/false));
    }
    ASSERT_OK(tier->Close());
  }

 private:
  std::mt19937_64 rng_;
  TempDir dir_;
  NamespaceSpec spec_;
  BlockKey root_;
  std::vector<int32_t> tokens_;
  std::vector<BlockKey> keys_;
  std::vector<std::string> patterns_;
};

}  // namespace prefixkv::testing
