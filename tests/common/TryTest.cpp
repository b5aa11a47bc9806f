// The error-propagation macros (Try.hpp) and the Expected matchers the suites assert with
// (tests/support/ExpectedMatchers.hpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "pipestudio/common/Try.hpp"
#include "support/ExpectedMatchers.hpp"

using namespace pipestudio;
using test::HasError;
using test::HasValue;
using ::testing::Not;

namespace {

int g_evaluations = 0;

Expected<int> parse(const std::string& text) {
  ++g_evaluations;
  if (text.empty()) return Error{"<text>: empty (expected a number)"};
  return std::stoi(text);
}

Status check(int value) {
  if (value < 0) return Error{"negative"};
  return {};
}

Expected<std::unique_ptr<int>> boxed(int value) {
  if (value == 0) return Error::cancelled();
  return std::make_unique<int>(value);
}

// Declares from the value, passes a Status through, assigns an existing variable.
Expected<int> twice(const std::string& text) {
  PS_ASSIGN_OR_RETURN(const int value, parse(text));
  PS_RETURN_IF_ERROR(check(value));
  int again = 0;
  PS_ASSIGN_OR_RETURN(again, parse(text));
  return value + again;
}

Status sumBoxes(int a, int b, int& out) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<int> x, boxed(a));  // a move-only value
  PS_ASSIGN_OR_RETURN(std::unique_ptr<int> y, boxed(b));
  out = *x + *y;
  return {};
}

}  // namespace

TEST(Try, ValuesFlowAndErrorsReturnUnchanged) {
  g_evaluations = 0;
  EXPECT_THAT(twice("21"), HasValue());
  EXPECT_EQ(*twice("21"), 42);
  EXPECT_EQ(g_evaluations, 4);  // each macro evaluates its expression once
  EXPECT_THAT(twice(""), HasError("empty (expected a number)"));
  EXPECT_THAT(twice("-1"), HasError("negative"));
}

TEST(Try, MoveOnlyValuesAndTheErrorKindPassThrough) {
  int out = 0;
  EXPECT_THAT(sumBoxes(2, 3, out), HasValue());
  EXPECT_EQ(out, 5);
  const Status cancelled = sumBoxes(2, 0, out);
  EXPECT_TRUE(cancelled.isCancelled());
}

TEST(ExpectedMatchers, ExplainWhatTheyFound) {
  const Expected<int> bad = Error{"model.json:3:7: /layers: expected an array"};
  ::testing::StringMatchResultListener listener;
  EXPECT_FALSE(::testing::ExplainMatchResult(HasValue(), bad, &listener));
  EXPECT_EQ(listener.str(), "has the error: model.json:3:7: /layers: expected an array");
  ::testing::StringMatchResultListener other;
  EXPECT_FALSE(::testing::ExplainMatchResult(HasError("/hidden"), bad, &other));
  EXPECT_THAT(other.str(), ::testing::HasSubstr("/layers"));
  EXPECT_THAT(bad, HasError("/layers"));
  EXPECT_THAT(Expected<int>(7), Not(HasError("anything")));
  EXPECT_THAT(Status{}, HasValue());
}
