// `prefixkv bench hot`: the hot tier's hit path and steady-state churn.
//
//   hit_ns_per_block        Pin + release of a resident block (lookup, pin,
//                           unpin), single thread, median over repeats.
//   get_ns_per_block        Get() of a resident block (lookup + recency).
//   limit_ns_per_lookup     the floor any thread-safe zero-copy map pays in
//                           the same run: mutex + unordered_map find + one
//                           shared-buffer copy, measured on the same keys.
//   insert_evict_ops_per_s  Put of a new block into a full budget, each
//                           evicting the least recently used block to a
//                           listener (steady state).
//   hit_copies_payload      false when Get and Pin hand out the stored buffer
//                           itself (checked by address).
//
// The figures above are the default policy's (lru). Then, per eviction policy
// (lru, leaf-lru, chain; docs/eviction.md) on the same blocks linked into
// chains of 16 (so chain structure is real): its hit and insert+evict cost
// and the ratio to lru's in the same run (`policies` in --json).
//
//   advisor                 the capacity advisor's cost on the TierStack's
//                           hit path (docs/eviction.md, "The capacity
//                           advisor"): Get of a resident block through a
//                           stack without and with the advisor, alternating
//                           (five rounds; min and max of the ratio), at the
//                           sampling rate of 2M distinct blocks seen and at
//                           the largest rate, max_rate 1/8 (a new engine or
//                           a small working set; `every_block_sampled_*` in
//                           --json, named before the rate was capped).
#include <algorithm>
#include <random>
#include <unordered_map>

#include "prefixkv/advanced/capacity_advisor.h"
#include "prefixkv/advanced/hot_tier.h"
#include "prefixkv/advanced/mutex.h"
#include "prefixkv/advanced/tier_stack.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/suite.h"
#include "tools/cli/flags.h"
#include "tools/cli/json.h"

namespace prefixkv::cli {
namespace {

constexpr uint64_t kBlocks = 4096;          // resident blocks for the hit figures
constexpr size_t kPayloadBytes = 16 << 10;  // a small model's block
constexpr uint64_t kLookups = 200000;       // per measurement

struct HotResult {
  double hit_ns = 0, get_ns = 0, limit_ns = 0, insert_evict_per_s = 0;
  bool copies = true;
};

// One policy's figures on chained blocks.
struct PolicyResult {
  EvictionPolicyKind policy = EvictionPolicyKind::kLru;
  double hit_ns = 0, get_ns = 0, insert_evict_per_s = 0;
};

constexpr uint64_t kChainBlocks = 16;

BlockMeta MetaOf(uint64_t id) {
  BlockMeta m;
  m.key = BlockKey{0xBE7C, id};
  return m;
}

// Block `id` of chain id / 16: its parent is the previous block of the chain.
BlockMeta ChainedMetaOf(uint64_t id) {
  BlockMeta m = MetaOf(id);
  m.namespace_id = BlockKey{0xBE7C, 0};
  m.parent = id % kChainBlocks == 0 ? m.namespace_id : MetaOf(id - 1).key;
  return m;
}

// Resident keys in a shuffled order, so lookups do not walk memory linearly.
std::vector<BlockKey> ShuffledKeys() {
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < kBlocks; ++i) keys.push_back(MetaOf(i).key);
  std::shuffle(keys.begin(), keys.end(), std::mt19937_64(3));
  return keys;
}

template <typename Fn>
double NanosPerLookup(int repeats, const std::vector<BlockKey>& keys, Fn&& fn) {
  const double s = MedianSeconds(repeats, [&] {
    for (uint64_t i = 0; i < kLookups; ++i) fn(keys[i % keys.size()]);
  });
  return s * 1e9 / kLookups;
}

void MeasureHits(int repeats, HotResult* r) {
  auto tier = HotTier::Create({.capacity_bytes = kBlocks * HotEntryCharge(kPayloadBytes)})
                  .value();
  const SharedBytes payload = SharedBytes::Allocate(kPayloadBytes, nullptr);
  for (uint64_t i = 0; i < kBlocks; ++i) (void)tier->Put(MetaOf(i), payload, false);
  const std::vector<BlockKey> keys = ShuffledKeys();
  r->hit_ns = NanosPerLookup(repeats, keys, [&](const BlockKey& k) {
    std::optional<PinnedBlock> pin = tier->Pin(k);
    DoNotOptimize(pin->payload().data());
  });
  r->get_ns = NanosPerLookup(
      repeats, keys, [&](const BlockKey& k) { DoNotOptimize(tier->Get(k)->data()); });
  r->copies = tier->Get(keys[0])->data() != payload.data() ||
              tier->Pin(keys[1])->payload().data() != payload.data();

  // The same lock type the tiers use (prefixkv::Mutex, a std::mutex inside).
  Mutex mu;
  std::unordered_map<BlockKey, SharedBytes, BlockKeyHash> map;
  for (uint64_t i = 0; i < kBlocks; ++i) map.emplace(MetaOf(i).key, payload);
  r->limit_ns = NanosPerLookup(repeats, keys, [&](const BlockKey& k) {
    SharedBytes b;
    {
      MutexLock lock(&mu);
      b = map.find(k)->second;
    }
    DoNotOptimize(b.data());
  });
}

class CountingListener final : public EvictionListener {
 public:
  void OnEvict(const BlockMeta&, const SharedBytes&, bool) override { ++victims; }
  uint64_t victims = 0;
};

// Put of new blocks into a full tier of `policy`, each evicting one block;
// 0 when the run was not in steady state (a victim per insert).
double InsertEvictPerSecond(int repeats, EvictionPolicyKind policy,
                            BlockMeta (*meta_of)(uint64_t)) {
  constexpr uint64_t kResident = 1024, kInserts = 100000;
  auto tier =
      HotTier::Create(
          {.capacity_bytes = kResident * HotEntryCharge(kPayloadBytes), .policy = policy})
          .value();
  CountingListener listener;
  tier->SetEvictionListener(&listener);
  // One buffer under every key: zero copy means the figure measures the tier,
  // not the allocator.
  const SharedBytes payload = SharedBytes::Allocate(kPayloadBytes, nullptr);
  uint64_t next = 0;
  for (; next < kResident; ++next) (void)tier->Put(meta_of(next), payload, true);
  const double s = MedianSeconds(repeats, [&] {
    for (uint64_t i = 0; i < kInserts; ++i)
      (void)tier->Put(meta_of(next++), payload, true);
  });
  return listener.victims == next - kResident ? kInserts / s : 0;
}

void MeasureInsertEvict(int repeats, HotResult* r) {
  r->insert_evict_per_s = InsertEvictPerSecond(repeats, EvictionPolicyKind::kLru, MetaOf);
}

PolicyResult MeasurePolicy(int repeats, EvictionPolicyKind policy) {
  PolicyResult r;
  r.policy = policy;
  auto tier = HotTier::Create({.capacity_bytes = kBlocks * HotEntryCharge(kPayloadBytes),
                               .policy = policy})
                  .value();
  const SharedBytes payload = SharedBytes::Allocate(kPayloadBytes, nullptr);
  for (uint64_t i = 0; i < kBlocks; ++i)
    (void)tier->Put(ChainedMetaOf(i), payload, false);
  const std::vector<BlockKey> keys = ShuffledKeys();
  r.hit_ns = NanosPerLookup(repeats, keys, [&](const BlockKey& k) {
    std::optional<PinnedBlock> pin = tier->Pin(k);
    DoNotOptimize(pin->payload().data());
  });
  r.get_ns = NanosPerLookup(
      repeats, keys, [&](const BlockKey& k) { DoNotOptimize(tier->Get(k)->data()); });
  r.insert_evict_per_s = InsertEvictPerSecond(repeats, policy, ChainedMetaOf);
  return r;
}

// The advisor's cost on the stack's hit path: ratios (with / without) over
// alternating rounds.
struct AdvisorCost {
  double rate = 0;  // the sampling rate of the primed advisor
  double plain_ns = 0, min_ratio = 0, max_ratio = 0, full_min = 0, full_max = 0;
};

AdvisorCost MeasureAdvisor(int repeats) {
  auto tier = HotTier::Create({.capacity_bytes = kBlocks * HotEntryCharge(kPayloadBytes)})
                  .value();
  const SharedBytes payload = SharedBytes::Allocate(kPayloadBytes, nullptr);
  for (uint64_t i = 0; i < kBlocks; ++i) (void)tier->Put(MetaOf(i), payload, false);
  CapacityAdvisor primed, full;
  for (uint64_t i = 0; i < 2'000'000; ++i) {
    const BlockKey k{0xAD5, i * 0x9E3779B97F4A7C15ull};
    if (primed.Sampled(k)) primed.OnGet(k, true, 1);
  }
  TierStack plain(tier.get(), nullptr);
  TierStack with_primed(tier.get(), nullptr, nullptr,
                        {.advisor = &primed, .advisor_block_tokens = 1});
  TierStack with_full(tier.get(), nullptr, nullptr,
                      {.advisor = &full, .advisor_block_tokens = 1});
  const std::vector<BlockKey> keys = ShuffledKeys();
  auto ns = [&](TierStack& s) {
    return NanosPerLookup(repeats, keys, [&](const BlockKey& k) {
      DoNotOptimize(s.Get(k)->payload.data());
    });
  };
  AdvisorCost c;
  c.min_ratio = c.full_min = 1e9;
  for (int round = 0; round < 5; ++round) {
    const double p = ns(plain), a = ns(with_primed), f = ns(with_full);
    c.plain_ns = round == 0 ? p : std::min(c.plain_ns, p);
    c.min_ratio = std::min(c.min_ratio, a / p);
    c.max_ratio = std::max(c.max_ratio, a / p);
    c.full_min = std::min(c.full_min, f / p);
    c.full_max = std::max(c.full_max, f / p);
  }
  c.rate = primed.Report().sampling_rate;
  return c;
}

int RunHotBench(const std::vector<std::string>& args) {
  BenchArgs bench;
  if (std::optional<int> done = ParseBenchArgs("hot", 9, args, &bench)) return *done;
  HotResult r;
  MeasureHits(bench.repeats, &r);
  MeasureInsertEvict(bench.repeats, &r);
  std::vector<PolicyResult> policies;
  (void)MeasurePolicy(1, EvictionPolicyKind::kLru);  // warm-up: the first one pays it
  for (EvictionPolicyKind p : {EvictionPolicyKind::kLru, EvictionPolicyKind::kLeafLru,
                               EvictionPolicyKind::kChain}) {
    policies.push_back(MeasurePolicy(bench.repeats, p));
  }
  const PolicyResult& lru = policies.front();
  const AdvisorCost advisor = MeasureAdvisor(bench.repeats);
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  if (bench.json) {
    SuiteJson out("hot");
    JsonWriter& j = out.j();
    j.Field("hit_ns_per_block", r.hit_ns)
        .Field("get_ns_per_block", r.get_ns)
        .Field("limit_ns_per_lookup", r.limit_ns)
        .Field("hit_ratio_vs_limit", r.limit_ns / r.hit_ns)
        .Field("insert_evict_ops_per_s", r.insert_evict_per_s)
        .Field("hit_copies_payload", r.copies);
    j.Key("policies").BeginArray();
    for (const PolicyResult& p : policies) {
      j.BeginObject()
          .Field("policy", EvictionPolicyName(p.policy))
          .Field("hit_ns_per_block", p.hit_ns)
          .Field("get_ns_per_block", p.get_ns)
          .Field("insert_evict_ops_per_s", p.insert_evict_per_s)
          .Field("hit_ns_ratio_vs_lru", ratio(p.hit_ns, lru.hit_ns))
          .Field("insert_evict_ratio_vs_lru",
                 ratio(p.insert_evict_per_s, lru.insert_evict_per_s))
          .EndObject();
    }
    j.EndArray();
    j.Key("advisor")
        .BeginObject()
        .Field("stack_get_ns_per_block", advisor.plain_ns)
        .Field("sampling_rate", advisor.rate)
        .Field("ratio_min", advisor.min_ratio)
        .Field("ratio_max", advisor.max_ratio)
        .Field("every_block_sampled_ratio_min", advisor.full_min)
        .Field("every_block_sampled_ratio_max", advisor.full_max)
        .EndObject();
    out.Print();
  } else {
    std::printf("hot tier benchmark (medians of %d runs)\n", bench.repeats);
    std::printf("  hit (pin + unpin)        %7.1f ns/block  (goal <= 250)\n", r.hit_ns);
    std::printf("  get                      %7.1f ns/block\n", r.get_ns);
    std::printf("  locked map lookup limit  %7.1f ns\n", r.limit_ns);
    std::printf("  insert+evict at full     %7.0f ops/s\n", r.insert_evict_per_s);
    std::printf("  hit copies payload       %s\n", r.copies ? "true" : "false");
    std::printf("per policy, blocks in chains of %llu (ratios to lru in this run)\n",
                static_cast<unsigned long long>(kChainBlocks));
    std::printf("  %-9s %9s %9s %14s %12s %12s\n", "policy", "hit ns", "get ns",
                "insert+evict/s", "hit vs lru", "churn vs lru");
    for (const PolicyResult& p : policies) {
      std::printf("  %-9s %9.1f %9.1f %14.0f %11.2fx %11.2fx\n",
                  std::string(EvictionPolicyName(p.policy)).c_str(), p.hit_ns, p.get_ns,
                  p.insert_evict_per_s, ratio(p.hit_ns, lru.hit_ns),
                  ratio(p.insert_evict_per_s, lru.insert_evict_per_s));
    }
    std::printf("capacity advisor on the stack's hit path (get %.1f ns/block without)\n",
                advisor.plain_ns);
    std::printf(
        "  sampling rate %.4f: %.3fx..%.3fx; at the largest rate (1/8): %.3fx..%.3fx\n",
        advisor.rate, advisor.min_ratio, advisor.max_ratio, advisor.full_min,
        advisor.full_max);
  }
  return 0;
}

}  // namespace

PKV_REGISTER_BENCH("hot", "hot tier hit path and insert+evict churn", RunHotBench);

}  // namespace prefixkv::cli
