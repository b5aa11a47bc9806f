#pragma once
// GoogleMock matchers for Expected<T> and Status (after Orbit's TestUtils.h), so a failing test
// prints the error instead of "false":
//
//     EXPECT_THAT(loadModel(path), HasValue());
//     EXPECT_THAT(loadModel(bad), HasError("/layers/0/hidden"));   // the message contains it
//     EXPECT_THAT(loadModel(bad), HasErrorThat(StartsWith("bad.json:3:")));
//     EXPECT_THAT(plan, Not(HasError("twice")));                   // a value, or another error
//     EXPECT_THAT(solve(cancelledControl), IsCancelled());
//     ASSERT_THAT(plan, HasValue());                               // then use *plan
//
// The matchers take an Expected of any value type or a Status.

#include <gmock/gmock.h>

#include <ostream>
#include <string>

#include "pipestudio/common/Expected.hpp"

namespace pipestudio {

// How gtest shows an Expected or a Status in "Actual: …" (otherwise a dump of its bytes); the
// matchers below add the error's message. (gtest looks the printer up by this name.)
template <typename T>
void PrintTo(const Expected<T>& expected, std::ostream* os) {  // NOLINT(readability-identifier-naming)
  *os << (expected ? "an Expected with a value" : "an Expected with an error");
}
inline void PrintTo(const Status& status, std::ostream* os) {  // NOLINT(readability-identifier-naming)
  *os << (status ? "an ok Status" : "a Status with an error");
}

}  // namespace pipestudio

namespace pipestudio::test {

MATCHER(HasValue, negation ? "has an error" : "has a value") {
  if (arg) return true;
  *result_listener << "has the error: " << arg.message();
  return false;
}

MATCHER_P(HasError, substring,
          std::string(negation ? "has a value or an error not containing \"" : "has an error containing \"") +
              std::string(substring) + "\"") {
  if (arg) {
    *result_listener << "has no error";
    return false;
  }
  const std::string& message = arg.message();
  if (message.find(substring) != std::string::npos) return true;
  *result_listener << "has the error: " << message;
  return false;
}

// An error whose whole message matches `matcher` (StartsWith, MatchesRegex, Eq, …).
MATCHER_P(HasErrorThat, matcher,
          std::string(negation ? "has a value or an error whose message does not match: "
                               : "has an error whose message ") +
              ::testing::DescribeMatcher<const std::string&>(matcher)) {
  if (arg) {
    *result_listener << "has no error";
    return false;
  }
  if (::testing::Matches(matcher)(arg.message())) return true;
  *result_listener << "has the error: " << arg.message();
  return false;
}

// An error of kind Cancelled (Error::cancelled()), not a value and not another failure.
MATCHER(IsCancelled, negation ? "is not cancelled" : "is cancelled") {
  if (arg.isCancelled()) return true;
  if (arg) {
    *result_listener << "has a value";
  } else {
    *result_listener << "has the error: " << arg.message();
  }
  return false;
}

}  // namespace pipestudio::test
