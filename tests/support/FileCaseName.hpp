#pragma once
// Names for the cases of a TEST_P over files: a param with a `file` member names its case after
// the file, every character other than a letter or digit made '_' ("model-feeds-cycle.json" →
// model_feeds_cycle_json), as gtest allows.
//
//     INSTANTIATE_TEST_SUITE_P(Corpus, BadInput, ::testing::ValuesIn(kCases), test::fileCaseName<Case>);

#include <gtest/gtest.h>

#include <cctype>
#include <string>

namespace pipestudio::test {

template <typename T>
std::string fileCaseName(const ::testing::TestParamInfo<T>& testInfo) {
  std::string name = testInfo.param.file;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

}  // namespace pipestudio::test
