// CUPTI time → the lanes' clock (executor/src/cuda/ClockAnchors.hpp), without a GPU. The cases
// are the ones seen on an H200 (tests/gpu/run.sh): CUPTI's own conversion milliseconds off the
// CUDA events and moving by about 0.5 ms from one delivery to the next, marker records that
// arrive before or after the lane states its event times, and four lanes on one GPU.
#include <gtest/gtest.h>

#include "cuda/ClockAnchors.hpp"

namespace pipestudio::exec::cuda {
namespace {

constexpr std::uint32_t kStream = 13;

std::int64_t hostOf(const ClockAnchors& a, std::uint32_t stream, std::uint64_t cuptiNs) {
  const auto offset = a.offsetFor(stream, cuptiNs);
  EXPECT_TRUE(offset.has_value()) << "record at " << cuptiNs << " still waits";
  return static_cast<std::int64_t>(cuptiNs) + offset.value_or(0);
}

TEST(ClockAnchors, WithoutMarkersTheInitialOffsetApplies) {
  ClockAnchors a;
  a.setInitialOffset(-1'000);
  EXPECT_EQ(hostOf(a, kStream, 5'000), 4'000);
  EXPECT_EQ(a.fallback(5'000), -1'000);
}

TEST(ClockAnchors, AKernelLandsInsideTheOpWhoseMarkerPrecedesIt) {
  ClockAnchors a;
  a.setInitialOffset(-3'600'000);  // CUPTI's own conversion, 3.6 ms off the events
  a.expect(kStream, 10'000'000);   // op 0 begins at 10 ms on the lane's clock
  a.marker(kStream, 13'600'000);
  EXPECT_EQ(hostOf(a, kStream, 13'650'000), 10'050'000) << "its kernel 50 µs after the op's begin";
}

TEST(ClockAnchors, EachOpKeepsItsOwnAnchorWhenCuptiMovesBetweenDeliveries) {
  ClockAnchors a;
  a.setInitialOffset(-1'000'000'000);
  // Two ops 5 ms apart on the lane's clock; CUPTI's conversion moved by 0.44 ms in between.
  a.marker(kStream, 1'000'000'000);
  a.marker(kStream, 1'005'440'000);
  a.expect(kStream, 0);
  a.expect(kStream, 5'000'000);
  EXPECT_EQ(hostOf(a, kStream, 1'004'000'000), 4'000'000) << "op 0's last kernel";
  EXPECT_EQ(hostOf(a, kStream, 1'005'450'000), 5'010'000) << "op 1's first kernel";
}

TEST(ClockAnchors, ARecordWaitsUntilItsMarkerHasItsEventTime) {
  ClockAnchors a;
  a.expect(kStream, 0);
  a.marker(kStream, 100);
  a.marker(kStream, 5'100);  // the next op's marker arrived; the lane has not ended the iteration
  EXPECT_EQ(hostOf(a, kStream, 4'000), 3'900);
  EXPECT_FALSE(a.offsetFor(kStream, 6'000).has_value()) << "the next op's kernel waits for its event time";
  EXPECT_EQ(a.fallback(6'000), -100) << "at the end of the run it takes the latest known offset";
  a.expect(kStream, 5'000);
  EXPECT_EQ(hostOf(a, kStream, 6'000), 5'900);
}

TEST(ClockAnchors, StreamsPairTheirMarkersSeparatelyAndInLaunchOrder) {
  ClockAnchors a;
  a.setInitialOffset(0);
  a.expect(1, 100);
  a.expect(2, 200);
  a.expect(1, 300);
  a.marker(2, 1'200);
  a.marker(1, 1'100);
  a.marker(1, 1'300);
  EXPECT_EQ(hostOf(a, 1, 1'150), 150);
  EXPECT_EQ(hostOf(a, 2, 1'250), 250);
  EXPECT_EQ(hostOf(a, 1, 1'350), 350);
  EXPECT_EQ(hostOf(a, 7, 1'250), 250) << "a stream without markers takes the latest marker of any stream";
}

TEST(ClockAnchors, AMarkerOffByAnIterationKeepsThePreviousOffset) {
  ClockAnchors a;
  a.setInitialOffset(0);
  a.expect(kStream, 0);
  a.marker(kStream, 150'000'000);  // a dropped marker record would pair the next one 150 ms off
  EXPECT_EQ(hostOf(a, kStream, 150'000'100), 150'000'100);
}

TEST(ClockAnchors, KeepsABoundedHistory) {
  ClockAnchors a;
  for (std::uint64_t i = 0; i < ClockAnchors::kKept + 10; ++i) {
    a.expect(kStream, static_cast<std::int64_t>(i * 1'000));
    a.marker(kStream, i * 1'000 + 7);
  }
  EXPECT_EQ(hostOf(a, kStream, (ClockAnchors::kKept + 9) * 1'000 + 10), (ClockAnchors::kKept + 9) * 1'000 + 3);
}

}  // namespace
}  // namespace pipestudio::exec::cuda
