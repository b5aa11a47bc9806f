#pragma once
// The timeline's tracks, one class per kind (after Orbit's TimeGraph with its TimerTrack,
// ThreadTrack, GpuTrack): compute ops (OpTrack), transfers and host copies (TransferTrack) and
// the GPU activity of a measured run (KernelTrack). Each lays out its lanes inside a device's
// row and fills them from the plan; TimelineData composes them. Qt-free; what a lane of each
// kind draws is TimelinePainters.hpp.
//
//   LaneBuild build(devices, ops, comms);
//   OpTrack ops(plan, lanesPerDevice, shadesChunks);
//   for each device d: ops.layOut(d, rowBands(...).compute, build); …
//   ops.fill(build); …
#include <cstdint>
#include <utility>
#include <vector>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/plan/Plan.hpp"
#include "pipestudio/viz/TimelineData.hpp"

namespace pipestudio::viz::tracks {

/// What the tracks build: the lanes, where each item went, and the time the items span.
struct LaneBuild {
  IdVector<Lane> lanes;
  IdVector<std::int32_t> opLane;        ///< lane of each op (-1: not shown)
  IdVector<std::int32_t> prevOnDevice;  ///< the device's previous compute op
  IdVector<std::int32_t> commLane;
  /// Activity events in lane order: (stream index, event index).
  std::vector<std::pair<std::int32_t, std::int32_t>> activityRefs;
  double beginMs;
  double endMs;
  int maxMicrobatch = 0;

  LaneBuild(std::size_t ops, std::size_t comms);
  /// Appends an interval to lane `lane` and widens the span.
  void add(int lane, double startMs, double endMs, std::uint8_t shade, std::int32_t microbatch, ItemRef item);
};

/// A band of a device's row, as offsets from the device's value d (device d spans [d, d + 1)).
struct Band {
  double lo = 0;
  double hi = 0;
};

/// The bands of one device's row: compute lane(s) on top, the transfer strip under them, then
/// the lanes of GPU activity.
struct RowBands {
  Band compute;
  Band transfers;
  Band kernels;
};
RowBands rowBands(bool compute, bool transfers, bool kernels);

/// One kind of track: its lanes in each device's row, and the intervals in them.
class Track {
 public:
  virtual ~Track() = default;
  /// Appends this track's lanes of `device` inside `band` of its row.
  virtual void layOut(int device, Band band, LaneBuild& build) = 0;
  /// Puts the track's intervals into the lanes it laid out.
  virtual void fill(LaneBuild& build) const = 0;
};

/// Compute ops: one lane per pipeline (two for bidirectional schedules, one when collapsed).
class OpTrack final : public Track {
 public:
  OpTrack(const Plan& plan, int lanesPerDevice, bool shadesChunks);
  void layOut(int device, Band band, LaneBuild& build) override;
  void fill(LaneBuild& build) const override;

 private:
  const Plan& m_plan;
  int m_lanesPerDevice;
  bool m_shadesChunks;
  IdVector<int> m_firstLane;  ///< by device
};

/// Transfers a device sends, and its host copies (activation offloading) on the same strip.
class TransferTrack final : public Track {
 public:
  explicit TransferTrack(const Plan& plan);
  void layOut(int device, Band band, LaneBuild& build) override;
  void fill(LaneBuild& build) const override;

 private:
  const Plan& m_plan;
  IdVector<int> m_lane;  ///< by device; -1: none
};

/// GPU activity of a measured run: one lane per stream of the device (all on one when collapsed).
class KernelTrack final : public Track {
 public:
  KernelTrack(const ActivityTrace& activity, int devices, bool collapsed);
  bool hasStreams(int device) const;
  void layOut(int device, Band band, LaneBuild& build) override;
  void fill(LaneBuild& build) const override;

 private:
  struct StreamLane {
    int lane = 0;
    std::vector<int> streams;  ///< indices into the trace's streams
  };
  const ActivityTrace& m_activity;
  bool m_collapsed;
  std::vector<std::vector<int>> m_streamsOfDevice;  ///< in (device, stream) order
  std::vector<StreamLane> m_lanes;
};

}  // namespace pipestudio::viz::tracks
