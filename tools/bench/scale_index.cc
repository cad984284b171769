// The index part of `prefixkv bench scale` (scale_bench.h): one SSD tier grown
// from 1,000 to 1M+ small blocks (chains of 64, as a prefix cache stores
// them) through the write-back path the engine uses (OnEvict, timed until
// Flush returns). At every size the tier is closed and reopened cold (its
// files' pages evicted) to time Open and to weigh what it allocates (glibc's
// malloc statistics: RocksDB and the index both allocate through it), the
// metadata database's files are weighed on disk, and single blocks are read
// cold (O_DIRECT) at random for the latency of a restore's read.
#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "prefixkv/advanced/ssd_tier.h"
#include "tools/bench/disk_util.h"
#include "tools/bench/scale_bench.h"

namespace prefixkv::cli {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kChainBlocks = 64;
constexpr uint64_t kNamespace = 9;

BlockMeta MetaOf(uint64_t i) {
  const BlockKey ns{kNamespace, 0};
  return BlockMeta{.key = BlockKey{kNamespace, i + 1},
                   .parent = i % kChainBlocks == 0 ? ns : BlockKey{kNamespace, i},
                   .namespace_id = ns,
                   .owner = 0};
}

uint64_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

double Since(uint64_t start_ns) {
  return static_cast<double>(Clock::System()->NowNanos() - start_ns) * 1e-9;
}

// Block i's payload: random bytes from a small pool, its index in the first
// eight bytes (what a read checks).
class Payloads {
 public:
  explicit Payloads(uint64_t bytes) : bytes_(bytes), pool_(bytes * 64) {
    std::mt19937_64 rng(5);
    for (size_t i = 0; i + 8 <= pool_.size(); i += 8) {
      const uint64_t v = rng();
      std::memcpy(pool_.data() + i, &v, 8);
    }
  }
  SharedBytes Of(uint64_t i) const {
    uint8_t* p = nullptr;
    SharedBytes b = SharedBytes::Allocate(bytes_, &p);
    std::memcpy(p, pool_.data() + (i % 64) * bytes_, bytes_);
    std::memcpy(p, &i, 8);
    return b;
  }
  bool Holds(const SharedBytes& b, uint64_t i) const {
    uint64_t stamp = 0;
    if (b.size() != bytes_) return false;
    std::memcpy(&stamp, b.data(), 8);
    return stamp == i && std::memcmp(b.data() + 8, pool_.data() + (i % 64) * bytes_ + 8,
                                     bytes_ - 8) == 0;
  }

 private:
  uint64_t bytes_;
  std::vector<uint8_t> pool_;
};

// Reopens the tier cold `kOpens` times (its files' pages evicted before
// each), filling the step's open (medians), heap and disk figures.
StatusOr<std::unique_ptr<SsdTier>> Reopen(std::unique_ptr<SsdTier> tier,
                                          const SsdTierOptions& o, IndexStep* step) {
  constexpr int kOpens = 3;
  const fs::path path(o.path);
  std::vector<double> wall, cpu;
  for (int k = 0; k < kOpens; ++k) {
    PKV_RETURN_IF_ERROR(tier->Close());
    tier.reset();
    step->metadata_disk_bytes = FileBytes(path, "segments");
    step->segment_disk_bytes = FileBytes(path / "segments");
    EvictFilePages(path);
    const uint64_t heap = HeapInUse();
    const double cpu0 = ProcessCpuSeconds();
    const uint64_t start = Clock::System()->NowNanos();
    PKV_ASSIGN_OR_RETURN(tier, SsdTier::Open(o));
    wall.push_back(Since(start));
    cpu.push_back(ProcessCpuSeconds() - cpu0);
    const uint64_t after = HeapInUse();
    step->heap_bytes = after > heap ? after - heap : 0;
    if (tier->open_report().blocks != step->blocks) {
      return Status::Internal("the reopened tier holds " +
                              std::to_string(tier->open_report().blocks) + " of " +
                              std::to_string(step->blocks) + " blocks");
    }
  }
  step->open_s = Summarize(wall).median;
  step->open_max_s = Summarize(wall).max;
  step->open_cpu_s = Summarize(cpu).median;
  return tier;
}

// Cold reads of `samples` random blocks among the first `n`, one at a time.
Status TimeGets(SsdTier& tier, const Payloads& payloads, uint64_t n, int samples,
                std::mt19937_64& rng, IndexStep* step, bool* identical) {
  std::vector<double> us;
  for (int s = 0; s < samples; ++s) {
    const uint64_t i = rng() % n;
    const uint64_t start = Clock::System()->NowNanos();
    PKV_ASSIGN_OR_RETURN(SharedBytes got, tier.Get(MetaOf(i).key));
    us.push_back(Since(start) * 1e6);
    *identical = *identical && payloads.Holds(got, i);
  }
  step->get_p50_us = Percentile(us, 0.5);
  step->get_p99_us = Percentile(us, 0.99);
  return Status::OK();
}

}  // namespace

StatusOr<IndexFigures> MeasureIndex(uint64_t max_blocks, uint64_t block_bytes,
                                    int samples, const fs::path& dir) {
  IndexFigures f;
  f.block_bytes = block_bytes;
  f.identical = true;
  std::error_code ec;
  fs::remove_all(dir, ec);
  SsdTierOptions o;
  o.path = dir.string();
  o.capacity_bytes = std::max<uint64_t>(2 * max_blocks * (block_bytes + 4096), 1 << 30);
  o.log = [](std::string_view) {};
  const Payloads payloads(block_bytes);
  std::mt19937_64 rng(1);
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<SsdTier> tier, SsdTier::Open(o));
  uint64_t n = 0;
  for (uint64_t target = std::min<uint64_t>(1000, max_blocks); n < max_blocks;
       target = std::min(target * 10, max_blocks)) {
    IndexStep step{.blocks = target};
    const uint64_t start = Clock::System()->NowNanos();
    for (; n < target; ++n) tier->OnEvict(MetaOf(n), payloads.Of(n), true);
    PKV_RETURN_IF_ERROR(tier->Flush());
    const double store_s = Since(start);
    const double added =
        static_cast<double>(target - (f.steps.empty() ? 0 : f.steps.back().blocks));
    step.store_blocks_per_s = added / store_s;
    step.store_mb_per_s = added * static_cast<double>(block_bytes) / store_s / 1e6;
    PKV_ASSIGN_OR_RETURN(tier, Reopen(std::move(tier), o, &step));
    PKV_RETURN_IF_ERROR(TimeGets(*tier, payloads, n, samples, rng, &step, &f.identical));
    f.steps.push_back(step);
  }
  PKV_RETURN_IF_ERROR(tier->Close());
  tier.reset();
  fs::remove_all(dir, ec);
  const IndexStep& first = f.steps.front();
  const IndexStep& last = f.steps.back();
  const double blocks = static_cast<double>(last.blocks);
  if (last.blocks > first.blocks) {
    f.ram_bytes_per_block =
        (static_cast<double>(last.heap_bytes) - static_cast<double>(first.heap_bytes)) /
        static_cast<double>(last.blocks - first.blocks);
  }
  f.ram_bytes_per_block_total = static_cast<double>(last.heap_bytes) / blocks;
  f.disk_metadata_bytes_per_block =
      static_cast<double>(last.metadata_disk_bytes) / blocks;
  return f;
}

namespace {

struct Series {
  const char* name;
  const char* colour;
  std::vector<double> values;
};

// One panel of a line chart at (x0, y0), `w` x `h`: `xs` on a log scale,
// the series on a linear one from 0.
void Panel(std::ostringstream& s, double x0, double y0, double w, double h,
           const std::vector<uint64_t>& xs, const std::vector<Series>& series,
           const std::string& ylabel) {
  double top = 0;
  for (const Series& se : series)
    for (double v : se.values) top = std::max(top, v);
  top = top > 0 ? top * 1.1 : 1;
  const double lo = std::log10(static_cast<double>(xs.front()));
  const double hi = std::log10(static_cast<double>(xs.back()));
  auto x = [&](uint64_t v) {
    const double t =
        hi > lo ? (std::log10(static_cast<double>(v)) - lo) / (hi - lo) : 0.5;
    return x0 + t * w;
  };
  auto y = [&](double v) { return y0 + h - v / top * h; };
  s << "<rect x=\"" << x0 << "\" y=\"" << y0 << "\" width=\"" << w << "\" height=\"" << h
    << "\" fill=\"none\" stroke=\"black\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double v = top * i / 4;
    s << "<line x1=\"" << x0 << "\" x2=\"" << x0 + w << "\" y1=\"" << y(v) << "\" y2=\""
      << y(v) << "\" stroke=\"#ddd\"/>\n<text x=\"" << x0 - 6 << "\" y=\"" << y(v) + 4
      << "\" text-anchor=\"end\">" << v << "</text>\n";
  }
  for (uint64_t v : xs) {
    s << "<text x=\"" << x(v) << "\" y=\"" << y0 + h + 16 << "\" text-anchor=\"middle\">"
      << v << "</text>\n";
  }
  s << "<text transform=\"translate(" << x0 - 52 << "," << y0 + h / 2
    << ") rotate(-90)\" text-anchor=\"middle\">" << ylabel << "</text>\n";
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& se = series[k];
    s << "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"" << se.colour
      << "\" points=\"";
    for (size_t i = 0; i < xs.size(); ++i) s << x(xs[i]) << "," << y(se.values[i]) << " ";
    s << "\"/>\n";
    for (size_t i = 0; i < xs.size(); ++i) {
      s << "<circle r=\"3\" fill=\"" << se.colour << "\" cx=\"" << x(xs[i]) << "\" cy=\""
        << y(se.values[i]) << "\"/>\n";
    }
    s << "<text x=\"" << x0 + 10 << "\" y=\"" << y0 + 18 + 16.0 * static_cast<double>(k)
      << "\" fill=\"" << se.colour << "\">" << se.name << "</text>\n";
  }
}

}  // namespace

std::string IndexSvg(const IndexFigures& f) {
  constexpr double kW = 900, kH = 380, kPanelW = 330, kPanelH = 260;
  std::vector<uint64_t> xs;
  Series p50{"restore read p50 (us)", "#1f77b4", {}};
  Series p99{"restore read p99 (us)", "#d62728", {}};
  Series store{"store (k blocks/s)", "#2ca02c", {}};
  Series open{"open (s x 10)", "#9467bd", {}};
  for (const IndexStep& s : f.steps) {
    xs.push_back(s.blocks);
    p50.values.push_back(s.get_p50_us);
    p99.values.push_back(s.get_p99_us);
    store.values.push_back(s.store_blocks_per_s / 1e3);
    open.values.push_back(s.open_s * 10);
  }
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(1);
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << kH
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"80\" y=\"24\" font-size=\"14\">SSD tier by blocks stored ("
    << f.block_bytes << "-byte blocks; " << f.ram_bytes_per_block
    << " bytes of RAM per block)</text>\n";
  Panel(s, 80, 50, kPanelW, kPanelH, xs, {p50, p99}, "microseconds");
  Panel(s, 530, 50, kPanelW, kPanelH, xs, {store, open}, "k blocks/s; s x 10");
  s << "<text x=\"" << kW / 2 << "\" y=\"" << kH - 16
    << "\" text-anchor=\"middle\">blocks in the tier (log scale)</text>\n</svg>\n";
  return s.str();
}

}  // namespace prefixkv::cli
