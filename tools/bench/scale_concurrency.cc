// The concurrency part of `prefixkv bench scale` (scale_bench.h): N client
// threads restore Llama-sized blocks (16 tokens, 2 MiB) from the SSD tier at
// random, first alone, then while write-back runs (a thread evicting new
// dirty blocks into the tier as fast as its queue takes them). The disk's
// limit is the same mix done raw in the same run: random O_DIRECT reads of
// 2 MiB on N threads, alone and beside sequential O_DIRECT writers (as many
// as the tier's writer threads), into files of the same size.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "prefixkv/advanced/ssd_tier.h"
#include "prefixkv/memory_resource.h"
#include "tools/bench/disk_util.h"
#include "tools/bench/scale_bench.h"

namespace prefixkv::cli {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kBlockBytes = uint64_t{2} << 20;  // 16 tokens of Llama 3 8B
constexpr uint32_t kWriterThreads = 2;               // SsdTierOptions' default

BlockMeta MetaOf(uint64_t i) {
  const BlockKey ns{11, 0};
  return BlockMeta{.key = BlockKey{11, i + 1}, .parent = ns, .namespace_id = ns};
}

double Since(uint64_t start_ns) {
  return static_cast<double>(Clock::System()->NowNanos() - start_ns) * 1e-9;
}

// What the reader threads saw during one window.
struct Window {
  std::vector<double> ms;  // every read's latency
  uint64_t read_bytes = 0, written_bytes = 0;
  double seconds = 0;
  bool ok = true;
};

// Runs `read(rng)` (returns false on an error) on `threads` threads, and
// `write(stop)` on `writers` threads, for `seconds`. Only `read` is timed;
// every 8th read of a thread is then checked with `check` (when given):
// the block `read` chose and the bytes it returned.
using ReadFn = std::function<bool(std::mt19937_64&, uint64_t* block, SharedBytes* got)>;
using CheckFn = std::function<bool(uint64_t block, const SharedBytes& got)>;
Window RunWindow(int threads, double seconds, const ReadFn& read, const CheckFn& check,
                 int writers,
                 const std::function<void(const std::atomic<bool>&)>& write) {
  Window w;
  std::atomic<bool> stop{false};
  std::vector<std::vector<double>> ms(static_cast<size_t>(threads));
  std::atomic<bool> ok{true};
  std::vector<std::thread> pool;
  const uint64_t start = Clock::System()->NowNanos();
  for (int t = 0; t < writers; ++t) pool.emplace_back([&] { write(stop); });
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 1);
      std::vector<double>& mine = ms[static_cast<size_t>(t)];
      while (!stop.load(std::memory_order_relaxed)) {
        uint64_t block = 0;
        SharedBytes got;
        const uint64_t at = Clock::System()->NowNanos();
        if (!read(rng, &block, &got)) ok = false;
        mine.push_back(Since(at) * 1e3);
        if (check && mine.size() % 8 == 1 && !check(block, got)) ok = false;
      }
    });
  }
  while (Since(start) < seconds)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stop = true;
  w.seconds = Since(start);
  for (std::thread& t : pool) t.join();
  for (const auto& v : ms) w.ms.insert(w.ms.end(), v.begin(), v.end());
  w.read_bytes = w.ms.size() * kBlockBytes;
  w.ok = ok;
  return w;
}

double MbPerS(uint64_t bytes, double seconds) {
  return static_cast<double>(bytes) / seconds / 1e6;
}

// An O_DIRECT file of `bytes` (random contents) for the raw side.
class RawFile {
 public:
  RawFile(const fs::path& path, uint64_t bytes) : bytes_(bytes) {
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
    if (fd_ < 0) return;
    void* buf = Aligned();
    std::mt19937_64 rng(3);
    for (size_t i = 0; i + 8 <= kBlockBytes; i += 8) {
      const uint64_t v = rng();
      std::memcpy(static_cast<uint8_t*>(buf) + i, &v, 8);
    }
    for (uint64_t at = 0; at < bytes && ok_; at += kBlockBytes)
      ok_ = pwrite(fd_, buf, kBlockBytes, static_cast<off_t>(at)) == ssize_t(kBlockBytes);
    free(buf);
  }
  ~RawFile() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0 && ok_; }
  uint64_t blocks() const { return bytes_ / kBlockBytes; }
  // One 2 MiB O_DIRECT read or write at block `i`, through a buffer of
  // this thread's.
  bool Read(uint64_t i) { return Io(i, false); }
  bool Write(uint64_t i) { return Io(i, true); }

 private:
  static void* Aligned() {
    void* p = nullptr;
    return posix_memalign(&p, 4096, kBlockBytes) == 0 ? p : nullptr;
  }
  bool Io(uint64_t i, bool write) {
    thread_local std::unique_ptr<void, decltype(&free)> buf(Aligned(), &free);
    const off_t at = static_cast<off_t>((i % blocks()) * kBlockBytes);
    const ssize_t n = write ? pwrite(fd_, buf.get(), kBlockBytes, at)
                            : pread(fd_, buf.get(), kBlockBytes, at);
    return n == ssize_t(kBlockBytes);
  }
  uint64_t bytes_;
  int fd_ = -1;
  bool ok_ = true;
};

Status MeasureRaw(int threads, double seconds, uint64_t read_bytes, const fs::path& dir,
                  ConcurrencyFigures* f) {
  RawFile src(dir / "raw-read", read_bytes), dst(dir / "raw-write", read_bytes);
  if (!src.ok() || !dst.ok())
    return Status::IOError("cannot write raw files in " + dir.string());
  EvictFilePages(dir);
  auto read = [&](std::mt19937_64& rng, uint64_t*, SharedBytes*) {
    return src.Read(rng());
  };
  const Window alone = RunWindow(threads, seconds, read, nullptr, 0, nullptr);
  std::atomic<uint64_t> next{0}, written{0};
  const Window mixed = RunWindow(threads, seconds, read, nullptr, kWriterThreads,
                                 [&](const std::atomic<bool>& stop) {
                                   while (!stop.load(std::memory_order_relaxed)) {
                                     if (dst.Write(next++)) written += kBlockBytes;
                                   }
                                 });
  if (!alone.ok || !mixed.ok) return Status::IOError("a raw read failed");
  f->raw_alone_read_mb_s = MbPerS(alone.read_bytes, alone.seconds);
  f->raw_read_mb_s = MbPerS(mixed.read_bytes, mixed.seconds);
  f->raw_write_mb_s = MbPerS(written, mixed.seconds);
  f->raw_p50_ms = Percentile(mixed.ms, 0.5);
  f->raw_p99_ms = Percentile(mixed.ms, 0.99);
  return Status::OK();
}

Status MeasureTier(int threads, double seconds, uint64_t read_bytes, const fs::path& dir,
                   ConcurrencyFigures* f) {
  SsdTierOptions o;
  o.path = (dir / "tier").string();
  o.writer_threads = kWriterThreads;
  o.capacity_bytes = 4 * read_bytes + (uint64_t{4} << 30);
  o.log = [](std::string_view) {};
  // Reads land in an arena as the engine's do (its default memory resource
  // is the tier's read_memory): retained regions on huge pages, so a read
  // neither faults in a fresh buffer nor pins 512 small pages.
  o.read_memory = NewArenaMemoryResource(
      {.max_region_bytes = size_t{64} << 20, .retain_bytes = size_t{256} << 20});
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<SsdTier> tier, SsdTier::Open(o));
  std::vector<SharedBytes> payloads;
  std::mt19937_64 fill(4);
  for (int p = 0; p < 16; ++p) {
    uint8_t* d = nullptr;
    payloads.push_back(SharedBytes::Allocate(kBlockBytes, &d));
    for (size_t i = 0; i + 8 <= kBlockBytes; i += 8) {
      const uint64_t v = fill();
      std::memcpy(d + i, &v, 8);
    }
  }
  const uint64_t stored = std::max<uint64_t>(read_bytes / kBlockBytes, 1);
  for (uint64_t i = 0; i < stored; ++i) tier->OnEvict(MetaOf(i), payloads[i % 16], true);
  PKV_RETURN_IF_ERROR(tier->Flush());
  EvictFilePages(o.path);
  auto read = [&](std::mt19937_64& rng, uint64_t* block, SharedBytes* got) {
    *block = rng() % stored;
    StatusOr<SharedBytes> payload = tier->Get(MetaOf(*block).key);
    if (!payload.ok()) return false;
    *got = std::move(payload).value();
    return true;
  };
  std::atomic<bool> identical{true};
  auto check = [&](uint64_t block, const SharedBytes& got) {
    const SharedBytes& want = payloads[block % 16];
    if (got.size() != want.size() ||
        std::memcmp(got.data(), want.data(), want.size()) != 0)
      identical = false;
    return true;
  };
  const Window alone = RunWindow(threads, seconds, read, check, 0, nullptr);
  std::atomic<uint64_t> next{stored};
  const uint64_t written0 = tier->SpaceUsage().bytes_written;
  const Window mixed =
      RunWindow(threads, seconds, read, check, 1, [&](const std::atomic<bool>& stop) {
        while (!stop.load(std::memory_order_relaxed)) {
          const uint64_t i = next++;
          tier->OnEvict(MetaOf(i), payloads[i % 16], true);
        }
      });
  const uint64_t written = tier->SpaceUsage().bytes_written - written0;
  PKV_RETURN_IF_ERROR(tier->Close());
  if (!alone.ok || !mixed.ok) return Status::IOError("a restore's read failed");
  f->identical = identical;
  f->alone_p50_ms = Percentile(alone.ms, 0.5);
  f->alone_p99_ms = Percentile(alone.ms, 0.99);
  f->alone_read_mb_s = MbPerS(alone.read_bytes, alone.seconds);
  f->p50_ms = Percentile(mixed.ms, 0.5);
  f->p99_ms = Percentile(mixed.ms, 0.99);
  f->read_mb_s = MbPerS(mixed.read_bytes, mixed.seconds);
  f->write_mb_s = MbPerS(written, mixed.seconds);
  f->restores = mixed.ms.size();
  return Status::OK();
}

}  // namespace

StatusOr<ConcurrencyFigures> MeasureConcurrency(int threads, double seconds,
                                                uint64_t read_bytes,
                                                const fs::path& dir) {
  ConcurrencyFigures f{
      .threads = threads, .seconds = seconds, .block_bytes = kBlockBytes};
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir.string() + ": " + ec.message());
  read_bytes = std::max(read_bytes, kBlockBytes);
  Status s = MeasureTier(threads, seconds, read_bytes, dir, &f);
  if (s.ok()) s = MeasureRaw(threads, seconds, read_bytes, dir, &f);
  fs::remove_all(dir, ec);
  PKV_RETURN_IF_ERROR(s);
  return f;
}

}  // namespace prefixkv::cli
