#pragma once
// GoogleMock matchers for Expected<T> and Status (after Orbit's TestUtils.h), so a failing test
// prints the error instead of "false":
//
//     EXPECT_THAT(loadModel(path), HasValue());
//     EXPECT_THAT(loadModel(bad), HasError("/layers/0/hidden"));   // the message contains it
//     ASSERT_THAT(plan, HasValue());                               // then use *plan
//
// HasValue() and HasError(...) take an Expected of any value type or a Status.

#include <gmock/gmock.h>

#include <string>

#include "pipestudio/common/Expected.hpp"

namespace pipestudio::test {

MATCHER(HasValue, "has a value") {
  if (arg) return true;
  *result_listener << "has the error: " << arg.message();
  return false;
}

MATCHER_P(HasError, substring, std::string("has an error containing \"") + std::string(substring) + "\"") {
  if (arg) {
    *result_listener << "has no error";
    return false;
  }
  const std::string& message = arg.message();
  if (message.find(substring) != std::string::npos) return true;
  *result_listener << "has the error: " << message;
  return false;
}

}  // namespace pipestudio::test
