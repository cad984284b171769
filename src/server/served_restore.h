// ServedRestore: a RESP client's restore, timed and counted like
// Engine::Restore. Clients of `prefixkv serve` restore with PKV.MATCH and
// then one PKV.GET per matched block, never calling Engine::Restore; one
// connection's sequence is one restore (docs/metrics.md, "Served restores"):
//
//   starts   at the start of a PKV.MATCH that matched at least one block;
//   ends     at the end of the PKV.GET that reads the last of the matched
//            blocks not read yet (any order, other commands in between), or,
//            when only some were read, at the end of the last such PKV.GET,
//            recorded when the connection's next PKV.MATCH starts;
//   counts   the tokens of the blocks read, by the tier PKV.MATCH found each
//            in (PrefixTokenCounters::restored_tokens_*).
//
// A sequence whose connection closes before every matched block is read is
// not recorded. Per connection (ClientState); not thread-safe, as the
// connection runs one command at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "prefixkv/engine.h"

namespace prefixkv::server {

class ServedRestore {
 public:
  // A PKV.MATCH that started at `start_nanos` answered `match`: records the
  // previous sequence when some of its blocks were read, then starts a new
  // one (none when nothing matched).
  void OnMatch(Engine* engine, const MatchResult& match, uint32_t block_tokens,
               uint64_t start_nanos);
  // A PKV.GET of block `key` of `ns` that ended at `end_nanos` answered the
  // block: records the sequence when it was its last unread block.
  void OnGet(Engine* engine, const Namespace& ns, const BlockKey& key,
             uint64_t end_nanos);
  // The blocks the sequence's PKV.MATCH found after block `key` of `ns`, for
  // its PKV.GET (Engine::GetBlock refuses them with a block of other shapes);
  // none when it matched no such block. Valid until the next OnMatch.
  BlocksAfter After(const Namespace& ns, const BlockKey& key) const;

 private:
  void Record(Engine* engine);
  // The index of matched block `key`, from next_ on; keys_.size() when none.
  size_t Find(const BlockKey& key) const;

  bool active_ = false;
  Namespace ns_;
  uint64_t start_nanos_ = 0;
  uint64_t last_read_nanos_ = 0;
  std::vector<BlockKey> keys_;    // matched, in chain order
  std::vector<TierLevel> tiers_;  // where PKV.MATCH found each
  std::vector<uint64_t> tokens_;  // tokens of each (the last may be a partial tail)
  std::vector<bool> read_;        // read by a PKV.GET
  size_t unread_ = 0;
  size_t next_ = 0;                  // where the next read likely is (chain order)
  PrefixTokenCounters read_tokens_;  // restored_tokens_* of the blocks read
};

}  // namespace prefixkv::server
