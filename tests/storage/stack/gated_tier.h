// GatedTier: a BlockTier wrapper that makes one thread stop at an exact point
// inside a tier operation, so a test can run another operation of the stack
// there and check the interleaving deterministically (no sleep-and-hope).
//
//   GatedTier ssd(&mem);
//   ssd.Arm(GatedTier::Op::kGet, key);   // the next Get of `key`...
//   std::thread reader([&] { stack.Get(key); });
//   ssd.WaitHeld();                       // ...has read `mem` and now waits
//   ... run the racing operation ...
//   ssd.Open();                           // the Get returns what it read
//
// kGet holds after the wrapped tier read the value (the caller has it, not
// yet returned); kPut holds before the wrapped tier stores it; kEvict holds a
// victim of the wrapped tier before it reaches this wrapper's listener;
// kRemove holds before the wrapped tier removes the key.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "prefixkv/advanced/tier.h"

namespace prefixkv::testing {

// Thread-safe: every method may be called concurrently.
class GatedTier final : public BlockTier, private EvictionListener {
 public:
  enum class Op { kGet, kPut, kEvict, kRemove };

  explicit GatedTier(BlockTier* inner) : inner_(inner) {}

  // The next `op` of `key` holds (once) until Open().
  void Arm(Op op, const BlockKey& key) {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = true;
    op_ = op;
    key_ = key;
  }
  // Waits until the armed operation holds.
  void WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return held_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

  std::string_view name() const override { return inner_->name(); }
  Status Put(const BlockMeta& meta, SharedBytes payload, bool dirty) override {
    MaybeHold(Op::kPut, meta.key);
    return inner_->Put(meta, std::move(payload), dirty);
  }
  StatusOr<SharedBytes> Get(const BlockKey& key) override {
    StatusOr<SharedBytes> got = inner_->Get(key);
    MaybeHold(Op::kGet, key);
    return got;
  }
  StatusOr<BlockMeta> Peek(const BlockKey& key) const override {
    return inner_->Peek(key);
  }
  bool Contains(const BlockKey& key) const override { return inner_->Contains(key); }
  Status WriteBackStatus() const override { return inner_->WriteBackStatus(); }
  Status Remove(const BlockKey& key) override {
    MaybeHold(Op::kRemove, key);
    return inner_->Remove(key);
  }
  // Maintenance calls and hints pass through ungated.
  bool HintUnlikelyReuse(const BlockKey& key) override {
    return inner_->HintUnlikelyReuse(key);
  }
  StatusOr<SharedBytes> PeekPayload(const BlockKey& key) override {
    return inner_->PeekPayload(key);
  }
  bool MarkStoredBelow(const BlockMeta& meta, const SharedBytes& payload) override {
    return inner_->MarkStoredBelow(meta, payload);
  }
  TierCounters Totals() const override { return inner_->Totals(); }
  TierCounters OwnerCounters(OwnerId owner) const override {
    return inner_->OwnerCounters(owner);
  }
  Status Audit(std::vector<AuditFinding>* findings) override {
    return inner_->Audit(findings);
  }
  void ForEach(const std::function<void(const BlockMeta&, uint64_t)>& fn) const override {
    inner_->ForEach(fn);
  }
  void SetEvictionListener(EvictionListener* listener) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      listener_ = listener;
    }
    inner_->SetEvictionListener(listener != nullptr ? this : nullptr);
  }

 private:
  void OnEvict(const BlockMeta& meta, const SharedBytes& payload, bool dirty) override {
    MaybeHold(Op::kEvict, meta.key);
    EvictionListener* listener = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      listener = listener_;
    }
    if (listener != nullptr) listener->OnEvict(meta, payload, dirty);
  }

  void MaybeHold(Op op, const BlockKey& key) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!armed_ || op != op_ || key != key_) return;
    armed_ = false;
    held_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }

  BlockTier* const inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  EvictionListener* listener_ = nullptr;  // GUARDED_BY(mu_)
  bool armed_ = false;                    // GUARDED_BY(mu_)
  Op op_ = Op::kGet;                      // GUARDED_BY(mu_)
  BlockKey key_;                          // GUARDED_BY(mu_)
  bool held_ = false;                     // GUARDED_BY(mu_)
  bool open_ = false;                     // GUARDED_BY(mu_)
};

// Runs `fn` on a thread and reports whether it finished within `patience`.
// The racing operation of a gated test: a stack with the per-key guard keeps
// it waiting (it never finishes while the gate holds), one without lets it
// through at once.
class Racer {
 public:
  template <typename Fn>
  explicit Racer(Fn fn)
      : thread_([this, fn = std::move(fn)]() mutable {
          fn();
          std::lock_guard<std::mutex> lock(mu_);
          done_ = true;
          cv_.notify_all();
        }) {}
  ~Racer() { Join(); }
  bool FinishesWithin(std::chrono::milliseconds patience) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, patience, [&] { return done_; });
  }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace prefixkv::testing
