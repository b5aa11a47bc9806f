#include <gtest/gtest.h>

#include "pipestudio/common/Units.hpp"

using namespace pipestudio;

TEST(Units, ParsesBinaryAndDecimalSizes) {
  EXPECT_EQ(*parseBytes("40GiB"), 40 * kGiB);
  EXPECT_EQ(*parseBytes("512 MiB"), 512 * kMiB);
  EXPECT_EQ(*parseBytes("80GB"), 80'000'000'000);
  EXPECT_EQ(*parseBytes("1234"), 1234);
  EXPECT_FALSE(parseBytes("40 parsecs"));
  EXPECT_FALSE(parseBytes("-1GiB"));
  EXPECT_FALSE(parseBytes("GiB"));
  EXPECT_FALSE(parseBytes("1e30"));
}

TEST(Units, FormatsForPeople) {
  EXPECT_EQ(formatBytes(1536), "1.50 KiB");
  EXPECT_EQ(formatMs(12.345), "12.35 ms");
}
