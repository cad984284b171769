// FakeRemoteStore: an in-memory RemoteStore for the remote tier's tests, with
// the faults a real cluster has (down, failing writes, a flipped byte, an
// evicted key). Shares its state through a shared_ptr so a test keeps a handle
// after handing the store to an engine or a tier.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "prefixkv/advanced/remote_store.h"

namespace prefixkv::testing {

struct FakeRemoteState {
  std::mutex mu;
  std::map<std::string, std::string> values;
  std::map<std::string, uint32_t> ttls;
  bool down = false;     // every call fails with Unavailable
  int failing_sets = 0;  // the next N MultiSet calls fail
  // Writes of these keys fail (a master at maxmemory answers -OOM); the
  // others of the same call are stored.
  std::set<std::string> refused_keys;
  // The next N IncrBy calls with a TTL add their delta and give the counter
  // no expiry: the EXPIRE after the INCRBY failed (its master went silent
  // between the two); the next call with a TTL gives it one.
  int failing_expires = 0;
  // The next N IncrBy calls that add (delta > 0) fail before adding: the
  // counter's master was down for that call.
  int failing_adds = 0;
  uint64_t get_calls = 0;   // MultiGet round trips
  uint64_t keys_asked = 0;  // keys over all MultiGet calls
  uint64_t set_calls = 0;
  // While true, MultiSet waits (a slow cluster holding the writer);
  // sets_held counts the calls that began so.
  bool hold_sets = false;
  uint64_t sets_held = 0;
  // How long each MultiSet takes (a cluster slower than the stores).
  std::chrono::microseconds set_delay{0};
  std::condition_variable released;
  // Runs once, in the caller's thread, after the next MultiGet read its
  // values and before it answers (the store unlocked): what a node does
  // while its read is on the wire.
  std::function<void()> while_next_get_answers;

  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu);
      hold_sets = false;
    }
    released.notify_all();
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return values.size();
  }
  // Flips one byte of the value at `key` (which must exist).
  void FlipByte(const std::string& key, size_t offset) {
    std::lock_guard<std::mutex> lock(mu);
    std::string& v = values.at(key);
    v[offset % v.size()] ^= 0x40;
  }
};

class FakeRemoteStore final : public RemoteStore {
 public:
  explicit FakeRemoteStore(std::shared_ptr<FakeRemoteState> state)
      : state_(std::move(state)) {}

  Status MultiGet(std::span<const std::string> keys,
                  std::vector<std::optional<SharedBytes>>* values) override {
    std::function<void()> meanwhile;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      values->assign(keys.size(), std::nullopt);
      if (state_->down) return Status::Unavailable("fake store is down");
      ++state_->get_calls;
      state_->keys_asked += keys.size();
      for (size_t i = 0; i < keys.size(); ++i) {
        auto it = state_->values.find(keys[i]);
        if (it != state_->values.end()) (*values)[i] = SharedBytes::Copy(it->second);
      }
      meanwhile.swap(state_->while_next_get_answers);
    }
    if (meanwhile) meanwhile();
    return Status::OK();
  }
  Status MultiSet(std::span<const RemoteWrite> writes) override {
    std::vector<RemoteWriteResult> results;
    return MultiSetEach(writes, &results);
  }
  Status MultiSetEach(std::span<const RemoteWrite> writes,
                      std::vector<RemoteWriteResult>* results) override {
    std::unique_lock<std::mutex> lock(state_->mu);
    if (state_->hold_sets) ++state_->sets_held;
    state_->released.wait(lock, [&] { return !state_->hold_sets; });
    if (state_->set_delay.count() > 0) {
      const auto delay = state_->set_delay;
      lock.unlock();
      std::this_thread::sleep_for(delay);
      lock.lock();
    }
    Status call;
    if (state_->down) {
      call = Status::Unavailable("fake store is down");
    } else if (state_->failing_sets > 0) {
      --state_->failing_sets;
      call = Status::IOError("fake store refused the write");
    }
    results->assign(writes.size(), RemoteWriteResult{call});
    if (!call.ok()) return call;
    ++state_->set_calls;
    Status first;
    for (size_t i = 0; i < writes.size(); ++i) {
      const RemoteWrite& w = writes[i];
      if (state_->refused_keys.count(w.key) > 0) {
        (*results)[i].status = Status::IOError("fake store: OOM for " + w.key);
        if (first.ok()) first = (*results)[i].status;
        continue;
      }
      state_->values[w.key] = w.value;
      state_->ttls[w.key] = w.ttl_seconds;
    }
    return first;
  }
  Status Delete(std::span<const std::string> keys) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->down) return Status::Unavailable("fake store is down");
    for (const std::string& k : keys) state_->values.erase(k);
    return Status::OK();
  }
  StatusOr<int64_t> IncrBy(std::string_view key, int64_t delta,
                           uint32_t ttl_seconds) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->down) return Status::Unavailable("fake store is down");
    if (delta > 0 && state_->failing_adds > 0) {
      --state_->failing_adds;
      return Status::Unavailable("fake store: INCRBY failed");
    }
    std::string& v = state_->values[std::string(key)];
    const int64_t now = (v.empty() ? 0 : std::stoll(v)) + delta;
    v = std::to_string(now);
    if (ttl_seconds > 0 && state_->failing_expires > 0) {
      --state_->failing_expires;
      return now;  // added, its expiry not set
    }
    // EXPIRE NX: a counter without an expiry gets this one.
    if (ttl_seconds > 0 && state_->ttls[std::string(key)] == 0)
      state_->ttls[std::string(key)] = ttl_seconds;
    return now;
  }
  std::string Describe() const override { return "fake store"; }

 private:
  std::shared_ptr<FakeRemoteState> state_;
};

}  // namespace prefixkv::testing
