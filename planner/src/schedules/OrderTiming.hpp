#pragma once
// Timing of a per-device op order on the stage estimates, the way the simulator times it
// (Simulator.cpp): an op starts when its device is free and its inputs have arrived; a
// cross-device input travels on the directed link (from, to) for StageEstimate::sendMs, and
// transfers on one link serialise in the order their producers complete (ties: the lower
// device first). Generators use it to choose among candidate orders; the plan itself is
// always timed by the simulator.

#include <cstdint>
#include <vector>

#include "pipestudio/planner/Schedules.hpp"

namespace pipestudio::schedules {

struct OrderTiming {
  bool ok = false;                      ///< false: the order deadlocks or misses an op
  double makespanMs = 0;                ///< last end − first start
  double maxDeviceBubbleMs = 0;         ///< max over devices of span − busy
  double maxDeviceSpanMs = 0;           ///< max over devices of last end − first start
  std::vector<std::int64_t> peakBytes;  ///< per device: peak live activation bytes (docs/formats.md)
};

/// Times `order` (one op list per device) on `input`'s stage estimates and placement.
/// `withTransfers` false times it as if every transfer were free.
OrderTiming timeOrder(const ScheduleInput& input, const std::vector<std::vector<OrderedOp>>& order,
                      bool withTransfers = true);

/// Peak live activation bytes per device of an order (time-independent: a device's live
/// bytes change only at its own ops).
std::vector<std::int64_t> orderPeakBytes(const ScheduleInput& input, const std::vector<std::vector<OrderedOp>>& order);

/// Whether `a` is a better order than `b`: shorter makespan, then smaller worst device
/// bubble, both compared with a relative tolerance (so rounding never decides).
bool fasterThan(const OrderTiming& a, const OrderTiming& b);

}  // namespace pipestudio::schedules
