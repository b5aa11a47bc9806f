#pragma once
// The shape every loader gives a problem (docs/formats.md "bad input gets a clear error"):
//
//     test::expectPointedMessage(loadPlan(path).message(), path, 84, 17, "/ops/1/device", "is 5");

#include <gtest/gtest.h>

#include <regex>
#include <string>

namespace pipestudio::test {

/// `message` is one line `file:line:col: /json/pointer: what (expected …)` that names `path`
/// at `line`:`column` and `pointer`, and holds `what`.
inline void expectPointedMessage(const std::string& message, const std::string& path, int line, int column,
                                 const std::string& pointer, const std::string& what) {
  EXPECT_EQ(message.find('\n'), std::string::npos) << "one problem, one message:\n" << message;
  EXPECT_TRUE(std::regex_match(message, std::regex("^(.+):([0-9]+):([0-9]+): (/[^: ]*): (.+) \\(expected .+\\)$")))
      << "bad shape: " << message;
  const std::string prefix = path + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + pointer + ": ";
  EXPECT_EQ(message.rfind(prefix, 0), 0U) << message << "\nexpected prefix " << prefix;
  EXPECT_NE(message.find(what), std::string::npos) << message;
}

}  // namespace pipestudio::test
