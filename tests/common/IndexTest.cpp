#include <gtest/gtest.h>

#include <vector>

#include "pipestudio/common/Index.hpp"

using namespace pipestudio;

TEST(Index, InRangeRejectsNegativeAndPastTheEnd) {
  const std::vector<int> v{1, 2, 3};
  EXPECT_TRUE(inRange(v, 0));
  EXPECT_TRUE(inRange(v, 2));
  EXPECT_FALSE(inRange(v, 3));
  EXPECT_FALSE(inRange(v, -1));
  EXPECT_TRUE(inRange(v, std::size_t{2}));
  EXPECT_FALSE(inRange(std::vector<int>{}, 0));
}

TEST(Index, IdVectorIsIndexedAndSizedByInts) {
  IdVector<double> busyMs(3, 0.5);
  ASSERT_EQ(busyMs.size(), 3);
  busyMs[2] += 1.0;
  EXPECT_DOUBLE_EQ(busyMs[0], 0.5);
  EXPECT_DOUBLE_EQ(busyMs[2], 1.5);
  EXPECT_TRUE(busyMs.contains(2));
  EXPECT_FALSE(busyMs.contains(3));
  EXPECT_FALSE(busyMs.contains(-1));
  busyMs.push_back(4.0);
  EXPECT_EQ(busyMs.size(), 4);
  EXPECT_EQ(busyMs.values(), (std::vector<double>{0.5, 0.5, 1.5, 4.0}));
  busyMs.assign(2, 7.0);
  EXPECT_EQ(busyMs, (IdVector<double>{7.0, 7.0}));
}

TEST(Index, IdVectorOfBoolWorksThroughTheVectorsProxy) {
  IdVector<bool> done(2);
  done[1] = true;
  EXPECT_FALSE(done[0]);
  EXPECT_TRUE(done[1]);
}

TEST(Index, GridStoresRowAfterRow) {
  Grid<int> g(2, 3, -1);
  EXPECT_EQ(g.rows(), 2);
  EXPECT_EQ(g.cols(), 3);
  g(1, 0) = 10;
  g(0, 2) = 5;
  EXPECT_EQ(g.values(), (std::vector<int>{-1, -1, 5, 10, -1, -1}));
  EXPECT_TRUE(g.contains(1, 2));
  EXPECT_FALSE(g.contains(2, 0));
  EXPECT_FALSE(g.contains(0, -1));
  g.fill(0);
  EXPECT_EQ(g(1, 0), 0);
  const Grid<int> empty;
  EXPECT_EQ(empty.rows(), 0);
  EXPECT_TRUE(empty.values().empty());
}
