// ThreadSanitizer suppressions for the tests that run over a real SSD tier.
// Include it in exactly one file of a test binary (it defines the function).
//
// The system RocksDB is not built with ThreadSanitizer: its write groups and
// memtables synchronize through atomics TSan cannot see, so every race whose
// stack runs through RocksDB is a false report. An uninstrumented library has
// no frames of its own in TSan's stacks: a memset or memcpy it makes (e.g. a
// write group's leader appending the followers' small metadata batches to its
// own) is reported as if the last prefixkv frame made it, hence the
// suppression of ssd::TierImpl::DbWrite, the one out-of-line function that
// calls RocksDB's write path and does nothing else. Races in prefixkv's own
// code (index, queue, counters, segments, sessions, server) are still reported.
// KeepSegmentIdsFrom (the reclaimer's write of the next segment id before it
// unlinks segments) builds one local batch and hands it to DbWrite, and its
// frame is the one such a report names as the leader's.
#pragma once

extern "C" const char* __tsan_default_suppressions() {
  return "race:rocksdb::\nrace:prefixkv::ssd::TierImpl::DbWrite\n"
         "race:prefixkv::ssd::TierImpl::KeepSegmentIdsFrom\n";
}
