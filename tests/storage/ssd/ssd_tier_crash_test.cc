// Crash loop: a child process (this binary re-executed) stores blocks at full
// speed in one durability mode; the parent SIGKILLs it at a random moment,
// reopens the tier and checks that every block present is byte-identical to
// what was written, counters equal recomputed sums, no block lacks its parent,
// and (wal, sync) every acknowledged block survived.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "prefixkv/advanced/ssd_tier.h"
#include "tests/storage/ssd/ssd_test_util.h"
#include "tests/support/test_util.h"

namespace prefixkv {
namespace testing {
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TierConformance);
}  // namespace testing
namespace {

constexpr const char* kChildEnv = "PREFIXKV_SSD_CRASH_CHILD";

// What the child tells the parent, one fixed-size record per event.
struct Report {
  char type;  // 'S' started, 'A' Put acknowledged, 'Q' queued, 'F' queue flushed, 'R'
              // removing
  char pad[7];
  uint64_t hi, lo;
};

// The payload is a function of the key alone, so the parent can check any
// block it finds without knowing what the child got to write.
size_t PayloadSize(const BlockKey& k) {
  return 1 + (k.lo * 2654435761u + k.hi) % (24 << 10);
}
SharedBytes Payload(const BlockKey& k) {
  return testing::ConformancePayload(k, 0, PayloadSize(k));
}

// Set in the parent for the reclamation crash loop (and inherited by the
// child): a small capacity and small segments, so evictions leave garbage
// and segments are compacted and unlinked all the time.
constexpr const char* kPressureEnv = "PREFIXKV_SSD_CRASH_RECLAIM";
void ApplyReclaimPressure(SsdTierOptions* o) {
  if (std::getenv(kPressureEnv) == nullptr) return;
  o->capacity_bytes = 1 << 20;
  o->segment_bytes = 128 << 10;
}

void Send(int fd, char type, const BlockKey& k) {
  Report r{type, {}, k.hi, k.lo};
  if (write(fd, &r, sizeof r) != sizeof r) _exit(3);
}

// The child: chains of 1-12 blocks, each stored in order with Put (acked) or
// handed to the write-back queue and then flushed (acked by 'F'); now and
// then a chain's leaf is removed (announced first).
[[noreturn]] void RunChild(const std::string& spec) {
  char path[4096];
  char mode[16];
  int fd = -1;
  unsigned long long seed = 0, cycle = 0;
  if (std::sscanf(spec.c_str(), "%4095[^|]|%15[^|]|%d|%llu|%llu", path, mode, &fd, &seed,
                  &cycle) != 5) {
    _exit(2);
  }
  SsdTierOptions o = testing::TestSsdOptions(path);
  o.durability = ParseSsdDurability(mode).value();
  ApplyReclaimPressure(&o);
  auto opened = SsdTier::Open(o);
  if (!opened.ok()) _exit(4);
  std::unique_ptr<SsdTier> tier = std::move(opened).value();
  Send(fd, 'S', {});
  std::mt19937_64 rng(seed);
  for (uint64_t chain = 0;; ++chain) {
    const uint64_t length = 1 + rng() % 12;
    const bool queued = rng() % 4 == 0;
    for (uint64_t i = 0; i < length; ++i) {
      const BlockMeta m = testing::ChainBlock(cycle << 20 | chain, i, 1 + chain % 3);
      if (queued) {
        Send(fd, 'Q', m.key);
        tier->OnEvict(m, Payload(m.key), true);
      } else if (tier->Put(m, Payload(m.key), true).ok()) {
        Send(fd, 'A', m.key);
      }
    }
    if (queued && tier->Flush().ok()) Send(fd, 'F', {});
    if (rng() % 5 == 0) {
      const BlockMeta leaf =
          testing::ChainBlock(cycle << 20 | chain, length - 1, 1 + chain % 3);
      Send(fd, 'R', leaf.key);
      (void)tier->Remove(leaf.key);
    }
  }
}

TEST(SsdCrashChild, WritesUntilKilled) {
  const char* spec = std::getenv(kChildEnv);
  if (spec == nullptr) GTEST_SKIP() << "only runs as the crash loop's child";
  RunChild(spec);
}

struct ModeResult {
  uint64_t cycles = 0, verified = 0, lost = 0, wrong = 0, corrupt = 0, acked = 0;
};

// The parent's knowledge: acknowledged blocks, and blocks that may be gone.
struct Expected {
  std::set<BlockKey> acked;
  std::set<BlockKey> pending_queue;  // 'Q' since the last 'F'
  void Apply(const Report& r) {
    const BlockKey k{r.hi, r.lo};
    if (r.type == 'A') acked.insert(k);
    if (r.type == 'Q') pending_queue.insert(k);
    if (r.type == 'F') {
      acked.insert(pending_queue.begin(), pending_queue.end());
      pending_queue.clear();
    }
    if (r.type == 'R') acked.erase(k);
  }
};

pid_t SpawnChild(const std::string& dir, SsdDurability mode, uint64_t seed,
                 uint64_t cycle, int* read_fd) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  const std::string spec = dir + "|" + std::string(SsdDurabilityName(mode)) + "|" +
                           std::to_string(fds[1]) + "|" + std::to_string(seed) + "|" +
                           std::to_string(cycle);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a parent that was killed
    setenv(kChildEnv, spec.c_str(), 1);
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDOUT_FILENO);  // the child's gtest banner
    execl("/proc/self/exe", "ssd_tier_crash_test", "--gtest_filter=SsdCrashChild.*",
          static_cast<char*>(nullptr));
    _exit(5);
  }
  close(fds[1]);
  *read_fd = fds[0];
  return pid;
}

// Reads reports until `deadline` (or EOF); false on EOF.
bool Drain(int fd, Expected* e, bool* started,
           std::chrono::steady_clock::time_point deadline) {
  Report r;
  size_t have = 0;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return true;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    ssize_t n = read(fd, reinterpret_cast<char*>(&r) + have, sizeof r - have);
    if (n <= 0) return false;
    have += static_cast<size_t>(n);
    if (have < sizeof r) continue;
    have = 0;
    if (r.type == 'S') *started = true;
    e->Apply(r);
  }
}

void VerifyAfterKill(const std::string& dir, SsdDurability mode, const Expected& e,
                     ModeResult* out) {
  SsdTierOptions o = testing::TestSsdOptions(dir);
  o.durability = mode;
  auto tier = testing::OpenSsd(o);
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(tier->open_report().moved_aside_to.empty())
      << "a kill must not break the DB";
  EXPECT_TRUE(tier->open_report().counter_repairs.empty())
      << "counters are in the same batch";
  std::vector<BlockKey> present;
  tier->ForEach([&](const BlockMeta& m, uint64_t) { present.push_back(m.key); });
  for (const BlockKey& k : present) {
    StatusOr<SharedBytes> got = tier->Get(k);
    if (!got.ok()) {
      ++out->corrupt;
    } else if (got->view() != Payload(k).view()) {
      ++out->wrong;
    } else {
      ++out->verified;
    }
  }
  for (const BlockKey& k : e.acked) {
    if (!tier->Contains(k)) ++out->lost;
  }
  out->acked += e.acked.size();
  EXPECT_TRUE(tier->FindOrphans().empty()) << tier->FindOrphans().size() << " orphans";
  testing::ExpectCountersMatchContents(*tier, {0});
  ASSERT_OK(tier->Close());
}

TEST(SsdTierCrash, KillNineNeverExposesAWrongBlockAndLosesNoAcknowledgedOneInWalOrSync) {
  if (std::getenv(kChildEnv) != nullptr) GTEST_SKIP();
  const uint64_t cycles_per_mode = testing::Iterations(8, 40);
  std::mt19937_64 rng(testing::TestSeed("SsdTierCrash.KillNine"));
  for (SsdDurability mode :
       {SsdDurability::kFlush, SsdDurability::kWal, SsdDurability::kSync}) {
    testing::TempDir dir;
    const std::string path = (dir.path() / "ssd").string();
    ModeResult result;
    Expected expected;  // accumulates over the cycles: the same directory is reused
    for (uint64_t cycle = 0; cycle < cycles_per_mode; ++cycle) {
      int fd = -1;
      pid_t pid = SpawnChild(path, mode, rng(), cycle, &fd);
      bool started = false;
      const auto open_deadline =
          std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!started &&
             Drain(fd, &expected, &started,
                   std::chrono::steady_clock::now() + std::chrono::milliseconds(10)) &&
             std::chrono::steady_clock::now() < open_deadline) {
      }
      ASSERT_TRUE(started) << "child did not open the tier";
      const auto kill_at =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(20 + rng() % 400);
      Drain(fd, &expected, &started, kill_at);
      kill(pid, SIGKILL);
      int status = 0;
      waitpid(pid, &status, 0);
      Drain(fd, &expected, &started,
            std::chrono::steady_clock::now() + std::chrono::seconds(5));
      close(fd);
      ASSERT_TRUE(WIFSIGNALED(status))
          << "child exited early with " << WEXITSTATUS(status);
      VerifyAfterKill(path, mode, expected, &result);
      ++result.cycles;
      if (HasFatalFailure()) return;
      // What survived is the new truth; what flush mode lost is forgotten.
      if (mode == SsdDurability::kFlush) {
        SsdTierOptions o = testing::TestSsdOptions(path);
        auto tier = testing::OpenSsd(o);
        std::erase_if(expected.acked,
                      [&](const BlockKey& k) { return !tier->Contains(k); });
      }
      expected.pending_queue.clear();
    }
    std::printf(
        "[crash] mode=%s cycles=%llu acked_checks=%llu blocks_verified=%llu "
        "blocks_lost=%llu "
        "wrong_bytes_served=%llu corrupt_detected=%llu\n",
        std::string(SsdDurabilityName(mode)).c_str(),
        static_cast<unsigned long long>(result.cycles),
        static_cast<unsigned long long>(result.acked),
        static_cast<unsigned long long>(result.verified),
        static_cast<unsigned long long>(result.lost),
        static_cast<unsigned long long>(result.wrong),
        static_cast<unsigned long long>(result.corrupt));
    EXPECT_EQ(result.wrong, 0u);
    EXPECT_EQ(result.corrupt, 0u) << "a kill alone must not damage a block";
    EXPECT_GT(result.verified, 0u) << "the child must have stored something";
    if (mode != SsdDurability::kFlush) {
      EXPECT_EQ(result.lost, 0u);
    }
  }
}

// Kill -9 while evictions keep the reclaimer compacting and unlinking
// segments: a segment is unlinked only after the metadata that stopped
// referencing it is durable in the mode's sense, so after any kill no block
// points into a missing segment or at wrong bytes. (Blocks may be missing
// here: the capacity evicts them.)
TEST(SsdTierCrash, KillNineDuringSegmentReclamationLeavesNoDanglingBlock) {
  if (std::getenv(kChildEnv) != nullptr) GTEST_SKIP();
  const uint64_t cycles_per_mode = testing::Iterations(4, 20);
  std::mt19937_64 rng(testing::TestSeed("SsdTierCrash.Reclamation"));
  setenv(kPressureEnv, "1", 1);
  for (SsdDurability mode :
       {SsdDurability::kFlush, SsdDurability::kWal, SsdDurability::kSync}) {
    testing::TempDir dir;
    const std::string path = (dir.path() / "ssd").string();
    uint64_t verified = 0, wrong = 0, corrupt = 0, missing_segments = 0;
    for (uint64_t cycle = 0; cycle < cycles_per_mode; ++cycle) {
      int fd = -1;
      Expected ignored;
      pid_t pid = SpawnChild(path, mode, rng(), cycle, &fd);
      bool started = false;
      const auto open_deadline =
          std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!started &&
             Drain(fd, &ignored, &started,
                   std::chrono::steady_clock::now() + std::chrono::milliseconds(10)) &&
             std::chrono::steady_clock::now() < open_deadline) {
      }
      ASSERT_TRUE(started) << "child did not open the tier";
      Drain(
          fd, &ignored, &started,
          std::chrono::steady_clock::now() + std::chrono::milliseconds(50 + rng() % 400));
      kill(pid, SIGKILL);
      int status = 0;
      waitpid(pid, &status, 0);
      close(fd);
      SsdTierOptions o = testing::TestSsdOptions(path);
      o.durability = mode;
      ApplyReclaimPressure(&o);
      auto tier = testing::OpenSsd(o);
      ASSERT_NE(tier, nullptr);
      EXPECT_TRUE(tier->open_report().moved_aside_to.empty());
      missing_segments += tier->open_report().missing_segments;
      std::vector<BlockKey> present;
      tier->ForEach([&](const BlockMeta& m, uint64_t) { present.push_back(m.key); });
      for (const BlockKey& k : present) {
        StatusOr<SharedBytes> got = tier->Get(k);
        if (!got.ok()) {
          ++corrupt;
        } else if (got->view() != Payload(k).view()) {
          ++wrong;
        } else {
          ++verified;
        }
      }
      testing::ExpectCountersMatchContents(*tier, {0});
      ASSERT_OK(tier->Close());
    }
    std::printf(
        "[crash-reclaim] mode=%s cycles=%llu blocks_verified=%llu "
        "wrong_bytes_served=%llu "
        "corrupt_detected=%llu missing_segments=%llu\n",
        std::string(SsdDurabilityName(mode)).c_str(),
        static_cast<unsigned long long>(cycles_per_mode),
        static_cast<unsigned long long>(verified), static_cast<unsigned long long>(wrong),
        static_cast<unsigned long long>(corrupt),
        static_cast<unsigned long long>(missing_segments));
    EXPECT_EQ(wrong, 0u);
    EXPECT_EQ(corrupt, 0u) << "no block may point into an unlinked segment";
    EXPECT_EQ(missing_segments, 0u);
    EXPECT_GT(verified, 0u);
  }
  unsetenv(kPressureEnv);
}

}  // namespace
}  // namespace prefixkv
