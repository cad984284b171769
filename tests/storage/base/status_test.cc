// Status and StatusOr: the status-printing test macros (ASSERT_OK, EXPECT_OK,
// ASSERT_OK_AND_ASSIGN) and StatusOr::value() on an error, which aborts with the
// status in every build type.
#include "prefixkv/status.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "tests/support/test_util.h"

namespace prefixkv {
namespace {

Status DiskFull() { return Status::IOError("disk full"); }
StatusOr<int> Seven() { return 7; }
StatusOr<int> NoSeven() { return Status::NotFound("no seven"); }
StatusOr<std::unique_ptr<int>> Boxed() { return std::make_unique<int>(9); }

TEST(StatusMacros, PassOnOk) {
  EXPECT_OK(Status::OK());
  EXPECT_OK(Seven());
  ASSERT_OK(Status::OK());
  ASSERT_OK(Seven());
  ASSERT_OK_AND_ASSIGN(int seven, Seven());
  EXPECT_EQ(seven, 7);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<int> boxed, Boxed());  // move-only values
  EXPECT_EQ(*boxed, 9);
  int existing = 0;
  ASSERT_OK_AND_ASSIGN(existing, Seven());
  EXPECT_EQ(existing, 7);
}

TEST(StatusMacros, EvaluateTheExpressionOnce) {
  int calls = 0;
  auto counted = [&calls] {
    ++calls;
    return Status::OK();
  };
  EXPECT_OK(counted());
  ASSERT_OK(counted());
  EXPECT_EQ(calls, 2);
}

TEST(StatusMacros, ExpectOkFailsNonFatallyPrintingTheStatus) {
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(DiskFull()), "DiskFull() is OK");
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(DiskFull()), "IOError: disk full");
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(NoSeven()), "NotFound: no seven");
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(NoSeven()) << "streamed context", "streamed context");
}

TEST(StatusMacros, AssertOkFailsFatallyPrintingTheStatus) {
  EXPECT_FATAL_FAILURE(ASSERT_OK(DiskFull()), "DiskFull() is OK");
  EXPECT_FATAL_FAILURE(ASSERT_OK(DiskFull()), "IOError: disk full");
  EXPECT_FATAL_FAILURE(ASSERT_OK(NoSeven()), "NotFound: no seven");
}

// ASSERT_* returns from the function it fails in: nothing after it runs.
bool reached_after_assign = false;
void AssignOrFail() {
  ASSERT_OK_AND_ASSIGN(int value, NoSeven());
  reached_after_assign = value == 7;
}

TEST(StatusMacros, AssertOkAndAssignFailsFatallyPrintingTheStatus) {
  EXPECT_FATAL_FAILURE(
      {
        ASSERT_OK_AND_ASSIGN(int value, NoSeven());
        (void)value;
      },
      "NoSeven() is OK\n  Actual: NotFound: no seven");
  EXPECT_FATAL_FAILURE(AssignOrFail(), "NotFound: no seven");
  EXPECT_FALSE(reached_after_assign);
}

// Death tests run first (gtest orders *DeathTest suites before the rest).
// RelWithDebInfo and Release define NDEBUG: these pass there too.
TEST(StatusOrDeathTest, ValueOnAnErrorAbortsPrintingTheStatus) {
  StatusOr<int> error = Status::Corruption("bad magic");
  EXPECT_DEATH((void)error.value(),
               "StatusOr::value\\(\\) on an error: Corruption: bad magic");
  const StatusOr<int>& const_error = error;
  EXPECT_DEATH((void)const_error.value(), "on an error: Corruption: bad magic");
  EXPECT_DEATH((void)NoSeven().value(), "on an error: NotFound: no seven");
}

TEST(StatusOrDeathTest, DereferenceOnAnErrorAbortsPrintingTheStatus) {
  StatusOr<std::string> error = Status::Busy("try later");
  EXPECT_DEATH((void)*error, "StatusOr::value\\(\\) on an error: Busy: try later");
  EXPECT_DEATH((void)error->size(), "StatusOr::value\\(\\) on an error: Busy: try later");
  const StatusOr<std::string>& const_error = error;
  EXPECT_DEATH((void)*const_error, "on an error: Busy: try later");
  EXPECT_DEATH((void)const_error->size(), "on an error: Busy: try later");
}

// A remote service that is down or slow (the remote tier's store) is its own code.
TEST(Status, UnavailableHasItsOwnCodeAndName) {
  Status down = Status::Unavailable("node 127.0.0.1:7000 down");
  EXPECT_TRUE(down.IsUnavailable());
  EXPECT_FALSE(down.IsIOError());
  EXPECT_FALSE(Status::IOError("x").IsUnavailable());
  EXPECT_EQ(StatusCodeName(down.code()), "Unavailable");
  EXPECT_EQ(down.ToString(), "Unavailable: node 127.0.0.1:7000 down");
}

TEST(StatusOr, ValueOnOkReturnsTheValue) {
  StatusOr<std::string> ok = std::string("seven");
  EXPECT_EQ(ok.value(), "seven");
  EXPECT_EQ(*ok, "seven");
  EXPECT_EQ(ok->size(), 5u);
  EXPECT_EQ(std::move(ok).value(), "seven");
}

}  // namespace
}  // namespace prefixkv
