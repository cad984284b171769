// Engine: opening, model registration, the prefix-cache calls, Flush, Close.
// The key-value space, Stats and Audit live in engine_values.cc and
// engine_stats.cc.
#include "prefixkv/engine.h"

#include <algorithm>
#include <filesystem>

#include "engine_impl.h"
#include "prefixkv/codec.h"

namespace prefixkv {

Status internal::EngineImpl::OpenTiers() {
  if (options_.hot_capacity_bytes == 0 && options_.data_dir.empty()) {
    return Status::InvalidArgument("engine needs a hot tier or a data_dir (or both)");
  }
  if (options_.advisor_max_keys > kMaxAdvisorKeys) {
    return Status::InvalidArgument("advisor_max_keys must be at most " +
                                   std::to_string(kMaxAdvisorKeys));
  }
  FileSystem* fs = FileSystem::Default();
  OpenMemory();
  if (options_.advisor_max_keys > 0) {
    advisor_ = std::make_unique<CapacityAdvisor>(
        CapacityAdvisorOptions{.max_keys = options_.advisor_max_keys,
                               .half_life_seconds = options_.advisor_half_life_seconds,
                               .clock = clock_});
  }
  if (!options_.data_dir.empty()) {
    std::error_code ec;
    if (!options_.create_if_missing && !std::filesystem::exists(options_.data_dir, ec)) {
      return Status::NotFound("no data directory " + options_.data_dir);
    }
    SsdTierOptions o;
    o.path = options_.data_dir;
    o.capacity_bytes = options_.ssd_capacity_bytes;
    o.policy = options_.ssd_policy;
    o.durability = options_.durability;
    if (options_.clock != nullptr) o.clock = options_.clock;
    if (options_.file_system != nullptr) o.file_system = options_.file_system;
    o.log = options_.log;
    o.events = kv_events();
    o.read_memory = memory_;  // OpenMemory ran above
    // A rebuilt block's parent is in its record's header (the segment
    // extents do not keep it); a payload that is not this block's record
    // leaves it a chain root.
    o.rebuilt_parent = [](const BlockKey& key, const BlockKey& ns,
                          std::string_view payload) {
      StatusOr<RecordIdentity> id = PeekBlockIdentity(payload);
      return id.ok() && id->key == key && id->namespace_id == ns ? id->parent
                                                                 : BlockKey();
    };
    if (hooks_.configure_ssd) hooks_.configure_ssd(o);
    // The tools' opens (audit, inspect: read-only or repair off) change no
    // value; only a serving open drops shadowed older bytes.
    drop_shadowed_legacy_ = !o.read_only && o.repair_damaged_metadata;
    fs = o.file_system;
    PKV_ASSIGN_OR_RETURN(ssd_, SsdTier::Open(o));
    PKV_RETURN_IF_ERROR(OpenWear());
  }
  if (options_.hot_capacity_bytes > 0) {
    PKV_ASSIGN_OR_RETURN(
        budget_, SharedHotBudget::Create({.capacity_bytes = options_.hot_capacity_bytes,
                                          .policy = options_.hot_policy,
                                          .events = kv_events(),
                                          .clean_blocks_are_below = ssd_ != nullptr}));
  }
  PKV_RETURN_IF_ERROR(OpenRemote());
  PKV_RETURN_IF_ERROR(OpenStack());
  PrefixCacheOptions cache_options;
  cache_options.encode = options_.encode;
  if (cache_options.encode.memory == nullptr) cache_options.encode.memory = memory_;
  cache_options.decode_limits = options_.decode_limits;
  cache_ = std::make_unique<PrefixCache>(stack_.get(), cache_options);
  PKV_RETURN_IF_ERROR(OpenEvents(fs));
  DropShadowedLegacyValues();  // before any write can evict a record
  return Status::OK();
}

Status internal::EngineImpl::OpenStack() {
  if (budget_ != nullptr) {
    PKV_ASSIGN_OR_RETURN(hot_, HotTier::OpenShared(budget_, memory_));
  }
  TierStackOptions o;
  o.promote_on_ssd_hit = options_.promote_on_ssd_hit;
  o.write_through = options_.write_through;
  o.advisor = advisor_.get();  // each owner's block tokens: NewOwner
  if (remote_ != nullptr) {
    // on_spill: what the lowest local tier evicts goes to the remote tier
    // (the stack is the SSD tier's eviction listener for it).
    o.remote = remote_.get();
    o.put_to_remote = options_.remote_write == RemoteWriteMode::kAlways;
    o.remote_spill = remote_.get();
  }
  // Raw values (the key-value space's) are acknowledged writes: admission
  // never skips them (TierStack::MaySkip), nor do they reach the remote tier.
  o.admission = admission_.get();
  // The SSD tier is also the write-back target: it queues the hot tier's
  // dirty victims for its background writers.
  stack_ = std::make_unique<TierStack>(hot_.get(), ssd_.get(), ssd_.get(), o);
  // An adopted namespace stays out of the remote tier (RegisterModel) from
  // the open on: the SSD tier may evict its blocks, which on_spill hands to
  // the remote tier, before its model is registered again.
  if (remote_ != nullptr && ssd_ != nullptr) return KeepAdoptedNamespacesLocal();
  return Status::OK();
}

void internal::EngineImpl::OpenMemory() {
  memory_ = options_.memory_resource;
  if (memory_ == nullptr) {
    constexpr size_t kMinRegion = size_t{2} << 20, kMaxRegion = size_t{256} << 20;
    const size_t region =
        std::clamp<size_t>(options_.hot_capacity_bytes / 8, kMinRegion, kMaxRegion);
    memory_ = NewArenaMemoryResource(
        {.max_region_bytes = region,
         .min_region_bytes = kMinRegion,
         .retain_bytes = options_.hot_capacity_bytes + region,
         .prefault_bytes = std::min<uint64_t>(options_.arena_prefault_bytes,
                                              options_.hot_capacity_bytes + region),
         .map_ahead = true,
         .huge_pages = options_.arena_huge_pages});
  }
  if (options_.on_region.mapped || options_.on_region.unmapping) {
    memory_->SetRegionCallbacks(options_.on_region);
  }
}

Status internal::EngineImpl::OpenWear() {
  const EngineOptions& o = options_;
  PKV_ASSIGN_OR_RETURN(
      admission_,
      SsdAdmission::Create({.kind = o.ssd_admission,
                            .budget_bytes_per_day = o.ssd_write_budget_bytes_per_day,
                            .burst_seconds = o.ssd_write_budget_burst_seconds,
                            .clock = clock_}));
  if (o.ssd_endurance_bytes > 0 && o.ssd_drive_writes_per_day != 0)
    return Status::InvalidArgument(
        "give the ssd endurance as bytes written or as drive writes per day, not both");
  if (!(o.ssd_drive_writes_per_day >= 0) || o.ssd_drive_writes_per_day > 1e6)
    return Status::InvalidArgument("ssd drive writes per day must be between 0 and 1e6");
  if (o.ssd_wear_window_seconds == 0)
    return Status::InvalidArgument("ssd wear window must be > 0 seconds");
  const uint64_t drive =
      o.ssd_drive_capacity_bytes > 0 ? o.ssd_drive_capacity_bytes : o.ssd_capacity_bytes;
  endurance_bytes_ = o.ssd_endurance_bytes > 0
                         ? o.ssd_endurance_bytes
                         : static_cast<uint64_t>(o.ssd_drive_writes_per_day *
                                                 static_cast<double>(drive) * 365.0 *
                                                 o.ssd_warranty_years);
  wear_ = std::make_unique<internal::WearMeter>(
      uint64_t{o.ssd_wear_window_seconds} * 1'000'000'000, clock_->NowNanos(),
      ssd_->SpaceUsage().bytes_written);
  return Status::OK();
}

Status internal::EngineImpl::OpenRemote() {
  if (options_.remote.empty() && !hooks_.remote_store_factory) return Status::OK();
  std::unique_ptr<RemoteStore> store;
  if (hooks_.remote_store_factory) {
    store = hooks_.remote_store_factory();
    if (store == nullptr)
      return Status::InvalidArgument("remote store factory gave none");
  } else {
    RedisClusterOptions c;
    PKV_ASSIGN_OR_RETURN(c.seeds, ParseRedisSeeds(options_.remote));
    c.request_timeout_ms = options_.remote_timeout_ms;
    PKV_ASSIGN_OR_RETURN(store, OpenRedisClusterStore(c));
  }
  RemoteTierOptions o;
  o.default_limits = options_.remote_limits;
  o.clock = clock_;
  o.log = options_.log;
  if (hooks_.configure_remote) hooks_.configure_remote(o);
  remote_ = RemoteTier::Open(std::move(store), std::move(o));
  return Status::OK();
}

StatusOr<EngineOwner> internal::EngineImpl::NewOwner(const std::string& name,
                                                     std::optional<uint64_t> quota_bytes,
                                                     uint32_t advisor_block_tokens,
                                                     const BlockKey& namespace_id) {
  EngineOwner o;
  o.name = name;
  if (budget_ != nullptr) {
    PKV_ASSIGN_OR_RETURN(o.owner, budget_->RegisterOwner(name, quota_bytes));
    PKV_ASSIGN_OR_RETURN(o.hot, HotTier::Open(budget_, o.owner, memory_));
    NameOnSsd(o.owner,
              namespace_id.IsZero() ? std::string(kValuesOwnerName)
                                    : "model:" + namespace_id.ToHex(),
              namespace_id);
  }
  if (advisor_ != nullptr) stack_->SetAdvisorTokens(o.owner, advisor_block_tokens);
  return o;
}

void internal::EngineImpl::NameOnSsd(OwnerId owner, const std::string& ssd_name,
                                     std::optional<BlockKey> namespace_id) {
  if (ssd_ == nullptr) return;
  Status s = ssd_->BindOwner(owner, ssd_name, namespace_id);
  if (!s.ok() && options_.log) {
    options_.log("ssd tier: owner " + ssd_name + " not named: " + s.ToString());
  }
}

EngineModel* internal::EngineImpl::Find(Namespace ns) const {
  MutexLock lock(&mu_);
  for (const auto& m : models_) {
    if (m->ns.index == ns.index && m->ns.root == ns.root) return m.get();
  }
  return nullptr;
}

Engine::Engine(std::unique_ptr<internal::EngineImpl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() { (void)Close(); }

StatusOr<std::unique_ptr<Engine>> Engine::Open(const EngineOptions& options) {
  return OpenEngine(options, EngineHooks{});
}

StatusOr<Namespace> Engine::RegisterModel(const NamespaceSpec& spec,
                                          const ModelOptions& options) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  PKV_ASSIGN_OR_RETURN(std::string fingerprint, spec.Fingerprint());
  MutexLock lock(&impl_->mu_);
  for (const auto& m : impl_->models_) {
    if (m->fingerprint != fingerprint) continue;
    const auto limits = [](const ModelOptions& o) {
      return o.remote_limits.has_value()
                 ? std::optional(std::pair(o.remote_limits->ttl_seconds,
                                           o.remote_limits->max_bytes))
                 : std::nullopt;
    };
    if (m->options.store_partial_tail != options.store_partial_tail ||
        m->options.hot_quota_bytes != options.hot_quota_bytes ||
        limits(m->options) != limits(options)) {
      return Status::InvalidArgument("model " + spec.model +
                                     " is already registered with other options");
    }
    return m->ns;
  }
  PKV_ASSIGN_OR_RETURN(RootChoice chosen, impl_->ChooseRoot(spec, fingerprint));
  const RootChoice choice = impl_->UnlessHeldInThisRun(chosen, fingerprint);
  const BlockKey root = choice.root;
  const bool with_remote = !choice.shapes_recorded_later;
  PKV_RETURN_IF_ERROR(impl_->StoreManifest(spec, fingerprint, choice));
  auto model = std::make_unique<EngineModel>();
  model->fingerprint = fingerprint;
  model->options = options;
  std::string name = spec.model;
  if (impl_->budget_ != nullptr) {
    // Same model, other layout; or the key-value space's name, taken later.
    bool taken = name == kValuesOwnerName;
    for (OwnerId o = 0; o < impl_->budget_->owner_count() && !taken; ++o)
      taken = impl_->budget_->OwnerName(o).value() == name;
    if (taken) name.append("@").append(root.ToHex(), 0, 8);
  }
  PKV_ASSIGN_OR_RETURN(model->tiers, impl_->NewOwner(name, options.hot_quota_bytes,
                                                     spec.block_tokens, root));
  if (!with_remote) impl_->stack_->KeepLocal(root);
  if (impl_->remote_ != nullptr && with_remote && options.remote_limits.has_value()) {
    impl_->remote_->SetNamespaceLimits(root, *options.remote_limits);
  }
  NamespaceOptions ns_options;
  ns_options.owner = model->tiers.owner;
  ns_options.store_partial_tail = options.store_partial_tail;
  ns_options.root = root;
  ns_options.remote = with_remote;
  // Adopted on a sample of its blocks: every block read is checked.
  ns_options.check_layer_shapes = choice.shapes_recorded_later;
  PKV_ASSIGN_OR_RETURN(model->ns, impl_->cache_->RegisterModel(spec, ns_options));
  impl_->models_.push_back(std::move(model));
  return impl_->models_.back()->ns;
}

StatusOr<Namespace> Engine::FindModel(const BlockKey& root) const {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  MutexLock lock(&impl_->mu_);
  for (const auto& m : impl_->models_) {
    if (m->ns.root == root) return m->ns;
  }
  return Status::NotFound("no registered model has namespace " + root.ToHex());
}

StatusOr<Namespace> Engine::FindModel(const NamespaceSpec& spec) const {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  PKV_ASSIGN_OR_RETURN(std::string fingerprint, spec.Fingerprint());
  MutexLock lock(&impl_->mu_);
  for (const auto& m : impl_->models_) {
    if (m->fingerprint == fingerprint) return m->ns;
  }
  return Status::NotFound("no registered model has the spec " + fingerprint);
}

StatusOr<MatchResult> Engine::Match(Namespace ns, std::span<const int32_t> tokens) const {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  StatusOr<MatchResult> match = impl_->cache_->Match(ns, tokens);
  if (!match.ok()) return match;
  if (EngineModel* model = impl_->Find(ns)) {
    model->prefix_tokens.Add(
        {.query_tokens = tokens.size(), .hit_tokens = match->matched_tokens()});
  }
  return match;
}

void internal::RecordRestore(internal::EngineImpl& impl, Namespace ns,
                             uint64_t start_nanos, const RestoreResult* result) {
  EngineModel* model = impl.Find(ns);
  if (model == nullptr) return;
  model->restore_latency.RecordNanos(impl.clock_->NowNanos() - start_nanos);
  if (result != nullptr) {
    model->prefix_tokens.Add({.restored_tokens_hot = result->tokens_from_hot,
                              .restored_tokens_ssd = result->tokens_from_ssd,
                              .restored_tokens_remote = result->tokens_from_remote});
  }
}

StatusOr<RestoreResult> Engine::Restore(const MatchResult& match) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  const uint64_t start_nanos = impl_->clock_->NowNanos();
  StatusOr<RestoreResult> result = impl_->cache_->Restore(match);
  internal::RecordRestore(*impl_, match.ns, start_nanos,
                          result.ok() ? &*result : nullptr);
  return result;
}

StatusOr<RestoreIntoResult> Engine::RestoreInto(
    const MatchResult& match, std::span<const LayerDestination> destinations,
    const LayerRestoredCallback& on_layer) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  const uint64_t start_nanos = impl_->clock_->NowNanos();
  StatusOr<RestoreIntoResult> out =
      impl_->cache_->RestoreInto(match, destinations, on_layer);
  internal::RecordRestore(*impl_, match.ns, start_nanos,
                          out.ok() ? &out->result : nullptr);
  return out;
}

Status Engine::RecordServedRestore(Namespace ns, uint64_t duration_nanos,
                                   const PrefixTokenCounters& tokens) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  EngineModel* model = impl_->Find(ns);
  if (model == nullptr) return Status::NotFound("no registered model has this namespace");
  model->restore_latency.RecordNanos(duration_nanos);
  model->prefix_tokens.Add(tokens);
  return Status::OK();
}

StatusOr<StoreResult> Engine::Store(Namespace ns, std::span<const int32_t> tokens,
                                    const std::vector<LayerState>& layers,
                                    const StoreOptions& options) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  StatusOr<StoreResult> r = impl_->cache_->Store(ns, tokens, layers, options);
  impl_->SyncEvents();
  return r;
}

StatusOr<std::vector<std::pair<BlockKey, BlockKey>>> Engine::RecordedTips(
    Namespace ns) const {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  return impl_->cache_->RecordedTips(ns);
}

StatusOr<StoreResult> Engine::StoreRecords(Namespace ns,
                                           const std::vector<SharedBytes>& records,
                                           const StoreOptions& options) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  StatusOr<StoreResult> r = impl_->cache_->StoreRecords(ns, records, options);
  impl_->SyncEvents();
  return r;
}

StatusOr<SharedBytes> Engine::GetBlock(Namespace ns, const BlockKey& key,
                                       const BlocksAfter& after) {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  return impl_->cache_->GetBlock(ns, key, after);
}

StatusOr<NamespaceSpec> Engine::ModelSpec(Namespace ns) const {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  return impl_->cache_->Spec(ns);
}

size_t Engine::model_count() const {
  MutexLock lock(&impl_->mu_);
  return impl_->models_.size();
}

Status Engine::Flush() {
  PKV_RETURN_IF_ERROR(impl_->CheckOpen());
  // The dirty hot blocks (every model's and the key-value space's), then the
  // SSD tier's write-back queue (blocks evicted before this call). Each step runs
  // even when one before failed (a failing disk at shutdown: each error says
  // what could not be written); the first error is returned.
  Status first = impl_->stack_->Flush();
  if (impl_->ssd_ != nullptr) {
    Status s = impl_->ssd_->Flush();
    if (first.ok()) first = s;
  }
  // Blocks queued for the remote tier are written or dropped (bounded by the
  // cluster's timeouts; a remote failure is never an error here).
  if (impl_->remote_ != nullptr) impl_->remote_->Flush();
  impl_->SyncEvents();
  return first;
}

Status Engine::Close() {
  if (impl_->closed_.load(std::memory_order_acquire)) return Status::OK();
  // RAM's write-back below has no later try: a disk full earlier that has
  // room again must not refuse it until a retry interval passes
  // (EngineFileSystem.AShutdownAfterSpaceCameBackWritesRamBack).
  if (impl_->ssd_ != nullptr) impl_->ssd_->BeginStop();
  Status flushed = Flush();
  // What it could not write goes with RAM below: one more try, which only
  // the blocks still dirty take (on a disk still full the SSD tier refuses
  // them without I/O). A failure of a moment (a disk full until another
  // program's file went) lost them with room for them
  // (EngineFileSystem.AShutdownRetriesTheWriteBackOfRamAfterAMomentaryFullDisk).
  if (!flushed.ok()) flushed = Flush();
  impl_->closed_.store(true, std::memory_order_release);
  // Top down: nothing below may be destroyed while something above uses it.
  // The stack unregisters itself as the tiers' eviction listener.
  impl_->cache_.reset();
  {
    MutexLock lock(&impl_->mu_);
    impl_->values_stack_.store(nullptr, std::memory_order_release);
    impl_->values_.reset();
    impl_->models_.clear();
  }
  impl_->stack_.reset();
  impl_->hot_.reset();
  // A memory charge or a restore plan may keep the budget (and the blocks
  // left in it) past Close and past the engine: its evictions then report
  // to nobody, not to this engine's event log and callback.
  if (impl_->budget_ != nullptr) impl_->budget_->DetachEvents();
  impl_->budget_.reset();
  // What the failed Flush left in RAM went with the hot tier: the stop is not
  // a clean one (EngineFileSystem.AShutdownThatCouldNotWriteRamBackIsNotMarkedClean).
  if (!flushed.ok() && impl_->ssd_ != nullptr) impl_->ssd_->NoteBlocksLostAtStop();
  Status closed = impl_->ssd_ != nullptr ? impl_->ssd_->Close() : Status::OK();
  impl_->ssd_.reset();
  impl_->CloseEvents();
  if (impl_->remote_ != nullptr) impl_->remote_->Flush();
  impl_->remote_.reset();
  return flushed.ok() ? closed : flushed;
}

bool Engine::closed() const { return impl_->closed_.load(std::memory_order_acquire); }

std::shared_ptr<MemoryResource> Engine::memory_resource() const { return impl_->memory_; }
const EngineOptions& Engine::options() const { return impl_->options_; }

// engine_internals.h: the in-tree door to the tiers.
struct internal::EngineAccess {
  static StatusOr<std::unique_ptr<Engine>> Open(const EngineOptions& options,
                                                EngineHooks hooks) {
    auto impl = std::make_unique<EngineImpl>(options, std::move(hooks));
    PKV_RETURN_IF_ERROR(impl->OpenTiers());
    return std::unique_ptr<Engine>(new Engine(std::move(impl)));
  }
  static EngineImpl& Impl(Engine& engine) { return *engine.impl_; }
};

StatusOr<std::unique_ptr<Engine>> OpenEngine(const EngineOptions& options,
                                             EngineHooks hooks) {
  return internal::EngineAccess::Open(options, std::move(hooks));
}

PrefixCache& EnginePrefixCache(Engine& engine) {
  return *internal::EngineAccess::Impl(engine).cache_;
}
SharedHotBudget* EngineHotBudget(Engine& engine) {
  return internal::EngineAccess::Impl(engine).budget_.get();
}
SsdTier* EngineSsdTier(Engine& engine) {
  return internal::EngineAccess::Impl(engine).ssd_.get();
}
RemoteTier* EngineRemoteTier(Engine& engine) {
  return internal::EngineAccess::Impl(engine).remote_.get();
}

TierStack* EngineTiers(Engine& engine, Namespace ns) {
  internal::EngineImpl& impl = internal::EngineAccess::Impl(engine);
  return impl.Find(ns) != nullptr ? impl.stack_.get() : nullptr;
}

HotTier* EngineHotTier(Engine& engine, Namespace ns) {
  EngineModel* m = internal::EngineAccess::Impl(engine).Find(ns);
  return m != nullptr ? m->tiers.hot.get() : nullptr;
}

}  // namespace prefixkv
