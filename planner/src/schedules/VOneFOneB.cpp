// V-1F1B: the V placement (two chunks per device, chunk 0 down the devices and chunk 1 back up,
// Qi et al. 2023 §6) scheduled 1F1B-style with fused backward passes, and a warm-up that does
// not raise the steady state's peak memory. Built as the Zero Bubble authors build it
// (sail-sg/zero-bubble-pipeline-parallelism @ 39f2c18, zerobubble/scheduler/v1f1b.py,
// enabled by --enable-1f1b-v): every device repeats a six-slot pattern holding one pass of each
// kind (F0, F1, B1, B0 and the W1, W0 that mark where each backward frees its activations);
// the slots are staggered over the devices so that each pass follows its input; each kind keeps
// m consecutive repetitions from its first valid one; then, slot by slot, every pass moves to
// the first free slot after its inputs (a backward needs two free slots in a row, the place of
// its W), a forward no earlier than where the device's memory stays under the pattern's peak;
// finally the W marks are dropped and each backward is one fused pass.
// Candidates: that order and the greedy list construction with fused backwards within the
// order's per-device peak (Greedy.cpp), each timed as the simulator times it; the faster wins.
#include <algorithm>
#include <array>
#include <optional>
#include <string>

#include "pipestudio/common/Index.hpp"
#include "schedules/Generators.hpp"
#include "schedules/OrderTiming.hpp"

namespace pipestudio::schedules {
namespace {

// Pass kinds in the pattern, in the reference's notation order "FfBbWw": F0 (forward, chunk
// 0), F1, B1 (backward of chunk 1, the first backward of a microbatch on its device), B0, and
// the W marks of B1 and B0.
constexpr int kSlots = 6;
constexpr std::array<char, kSlots> kKinds{'F', 'f', 'B', 'b', 'W', 'w'};
constexpr char kEmpty = ' ';

// Index of a pass kind in kKinds (callers pass one of them).
std::size_t kindIndex(char c) {
  for (std::size_t i = 0; i < kKinds.size(); ++i) {
    if (kKinds[i] == c) return i;
  }
  return 0;
}

// Slot (0..5) of each kind in device d's pattern.
std::vector<std::array<int, kSlots>> patterns(int p) {
  std::vector<std::array<int, kSlots>> at(static_cast<std::size_t>(p));
  auto slot = [&](int d, int kind) -> int& { return at[static_cast<std::size_t>(d)][static_cast<std::size_t>(kind)]; };
  int now = 0;
  // Forwards of chunk 0 down the devices, then of chunk 1 back up, one slot apart.
  for (int d = 0; d < p; ++d) slot(d, 0) = ++now;
  for (int d = p - 1; d >= 0; --d) slot(d, 1) = ++now;
  // Backwards (each with its W mark after it) down then up, two slots apart, with three more
  // after every third device so that the slots repeat every six.
  ++now;
  if (p % 3 == 0) now += 3;
  int cycle = (3 - (p + 2) % 3) % 3;
  auto place = [&](int d, int backward, int mark) {
    slot(d, backward) = now;
    slot(d, mark) = now + 1;
    now += 2;
    if (++cycle == 3) {
      cycle = 0;
      now += 3;
    }
  };
  for (int d = 0; d < p; ++d) place(d, 2, 4);
  for (int d = p - 1; d >= 0; --d) place(d, 3, 5);
  for (auto& a : at) {
    for (int& s : a) s %= kSlots;
  }
  return at;
}

using Grid2 = std::vector<std::string>;  // per device, one character per slot

// Clears kind `c` of device d at slots pos, pos + step·6, … while inside the row.
void clearFrom(Grid2& g, int d, int pos, int step) {
  std::string& row = g[static_cast<std::size_t>(d)];
  while (pos >= 0 && pos < static_cast<int>(row.size())) {
    row[static_cast<std::size_t>(pos)] = kEmpty;
    pos += step * kSlots;
  }
}

// Keeps m consecutive repetitions of every kind from its first valid slot: walking forwards,
// kind by kind (F0 and B1 down the devices, F1 and B0 up), the next slot holding the kind on
// the device is its first repetition; a backward's W mark goes with it.
bool keepRepetitions(Grid2& g, int m) {
  const int p = static_cast<int>(g.size());
  const int length = static_cast<int>(g.front().size());
  int index = kSlots;
  for (const char kind : {'F', 'f', 'B', 'b'}) {
    const bool down = kind == 'F' || kind == 'B';
    for (int step = 0; step < p; ++step) {
      const int d = down ? step : p - 1 - step;
      std::string& row = g[static_cast<std::size_t>(d)];
      for (int j = 0; j < kSlots; ++j) {
        if (index >= length) return false;
        if (row[static_cast<std::size_t>(index)] != kind) {
          ++index;
          continue;
        }
        clearFrom(g, d, index - kSlots, -1);
        clearFrom(g, d, index + kSlots * m, 1);
        ++index;
        if (kind == 'B' || kind == 'b') {
          const char mark = kind == 'B' ? 'W' : 'w';
          for (int k = 0; k < kSlots && index + k < length; ++k) {
            if (row[static_cast<std::size_t>(index) + static_cast<std::size_t>(k)] != mark) continue;
            clearFrom(g, d, index + k - kSlots, -1);
            clearFrom(g, d, index + k + kSlots * m, 1);
            break;
          }
        }
        break;
      }
    }
  }
  return true;
}

// Moves every pass to the first free slot after its inputs (forwards not before the slot from
// which the device's memory stays under the pattern's peak), slot by slot.
bool compactWarmUp(Grid2& g, int m) {
  const int p = static_cast<int>(g.size());
  const int length = static_cast<int>(g.front().size());
  // Live activations per device and slot (F0, F1 hold one; W marks free one) and their peak.
  std::vector<std::vector<int>> mem(static_cast<std::size_t>(p), std::vector<int>(static_cast<std::size_t>(length)));
  int peak = 0;
  for (int d = 0; d < p; ++d) {
    int live = 0;
    for (int i = 0; i < length; ++i) {
      const char c = g[static_cast<std::size_t>(d)][static_cast<std::size_t>(i)];
      if (c == 'F' || c == 'f') ++live;
      if (c == 'W' || c == 'w') --live;
      mem[static_cast<std::size_t>(d)][static_cast<std::size_t>(i)] = live;
      peak = std::max(peak, live);
    }
  }
  // Slot of the n-th repetition (1-based) of each kind per device; -1 before it is placed.
  std::vector<std::vector<std::array<int, kSlots>>> loc(
      static_cast<std::size_t>(p), std::vector<std::array<int, kSlots>>(static_cast<std::size_t>(m) + 2));
  for (auto& perDevice : loc) {
    for (auto& a : perDevice) a.fill(-1);
  }
  std::vector<std::array<int, kSlots>> count(static_cast<std::size_t>(p));
  for (auto& a : count) a.fill(0);
  auto at = [&](int d, int n, char kind) -> int& {
    return loc[static_cast<std::size_t>(d)][static_cast<std::size_t>(n)][kindIndex(kind)];
  };
  for (int i = 0; i < length; ++i) {
    for (int d = 0; d < p; ++d) {
      std::string& row = g[static_cast<std::size_t>(d)];
      const char c = row[static_cast<std::size_t>(i)];
      if (c == kEmpty) continue;
      const int n = ++count[static_cast<std::size_t>(d)][kindIndex(c)];
      if (n > m + 1) return false;
      int pos = n > 1 ? at(d, n - 1, c) : -1;
      switch (c) {
        case 'W':
          pos = std::max(pos, at(d, n, 'B'));
          break;
        case 'w':
          pos = std::max(pos, at(d, n, 'b'));
          break;
        case 'F':
          if (d > 0) pos = std::max(pos, at(d - 1, n, 'F'));
          break;
        case 'f':
          pos = std::max(pos, d != p - 1 ? at(d + 1, n, 'f') : at(d, n, 'F'));
          break;
        case 'B':
          // The previous device's backward ends with its W mark (B and W are one pass).
          pos = std::max(pos, d != 0 ? at(d - 1, n, 'W') : at(d, n, 'f'));
          break;
        case 'b':
          pos = std::max(pos, d != p - 1 ? at(d + 1, n, 'w') : at(d, n, 'W'));
          break;
        default:
          break;
      }
      ++pos;
      auto empty = [&](int s) { return s < length && row[static_cast<std::size_t>(s)] == kEmpty; };
      while (pos < i && !empty(pos)) ++pos;
      if (c == 'B' || c == 'b') {
        while (pos < i && (!empty(pos) || !empty(pos + 1))) ++pos;
      }
      if (pos >= i) {
        at(d, n, c) = i;
        continue;
      }
      auto& live = mem[static_cast<std::size_t>(d)];
      if (c != 'F' && c != 'f') {
        row[static_cast<std::size_t>(pos)] = c;
        row[static_cast<std::size_t>(i)] = kEmpty;
        if (c == 'W' || c == 'w') {
          for (int j = pos; j < i; ++j) --live[static_cast<std::size_t>(j)];
        }
        at(d, n, c) = pos;
        continue;
      }
      int place = i;
      while (place > pos && live[static_cast<std::size_t>(place - 1)] < peak) --place;
      while (place < i && !empty(place)) ++place;
      if (place == i) {
        at(d, n, c) = i;
        continue;
      }
      row[static_cast<std::size_t>(place)] = c;
      row[static_cast<std::size_t>(i)] = kEmpty;
      for (int j = place; j < i; ++j) ++live[static_cast<std::size_t>(j)];
      at(d, n, c) = place;
    }
  }
  return true;
}

}  // namespace

std::optional<std::vector<std::vector<OrderedOp>>> vOneFOneBOrder(int p, int m) {
  if (p < 1 || m < 1) return std::nullopt;
  const auto at = patterns(p);
  const int repeats = 4 * p + m + 1;
  Grid2 g(static_cast<std::size_t>(p));
  for (int d = 0; d < p; ++d) {
    std::string unit(kSlots, kEmpty);
    for (int kind = 0; kind < kSlots; ++kind) {
      unit[static_cast<std::size_t>(at[static_cast<std::size_t>(d)][static_cast<std::size_t>(kind)])] =
          kKinds[static_cast<std::size_t>(kind)];
    }
    std::string& row = g[static_cast<std::size_t>(d)];
    row.reserve(static_cast<std::size_t>(repeats) * static_cast<std::size_t>(kSlots));
    for (int r = 0; r < repeats; ++r) row += unit;
  }
  if (!keepRepetitions(g, m) || !compactWarmUp(g, m)) return std::nullopt;
  // The first m of each kind, W marks dropped, as per-device orders: F0 is stage d, F1 and the
  // chunk-1 backward stage 2p − 1 − d.
  std::vector<std::vector<OrderedOp>> out(static_cast<std::size_t>(p));
  for (int d = 0; d < p; ++d) {
    std::array<int, kSlots> seen{};
    for (const char c : g[static_cast<std::size_t>(d)]) {
      if (c == kEmpty || c == 'W' || c == 'w') continue;
      int& n = seen[kindIndex(c)];
      if (n >= m) continue;
      const bool chunkOne = c == 'f' || c == 'B';
      const int stage = chunkOne ? 2 * p - 1 - d : d;
      out[static_cast<std::size_t>(d)].push_back({stage, c == 'F' || c == 'f' ? OpKind::F : OpKind::BW, n, 0});
      ++n;
    }
    if (static_cast<int>(out[static_cast<std::size_t>(d)].size()) != 4 * m) return std::nullopt;
  }
  return out;
}

namespace {

class VOneFOneB final : public ScheduleGenerator {
 public:
  std::string_view name() const override { return "v-1f1b"; }
  int defaultChunksPerDevice() const override { return 2; }
  bool splitsBackward() const override { return false; }
  Status validate(const ScheduleShape& shape) const override {
    return requireChunks(name(), shape, shape.chunksPerDevice == 2, "two chunks per device (one V)");
  }
  std::vector<VirtualStage> placement(const ScheduleShape& shape) const override {
    return wavePlacement(shape.devices, 2);
  }
  Expected<ScheduleSkeleton> order(const ScheduleInput& input) const override {
    const int p = input.shape.devices;
    const int m = input.shape.microbatches;
    ScheduleSkeleton out;
    out.virtualStages = input.virtualStages;
    auto pattern = vOneFOneBOrder(p, m);
    // The greedy construction with fused backwards, within the pattern's peak on each device
    // (1F1B's memory, p microbatches, when the pattern is not built).
    GreedyOptions options;
    options.splitBackward = false;
    options.preferContinuing = true;
    options.boundEveryForward = false;
    const auto perMb = activationPerMicrobatch(input, 0);
    std::vector<std::int64_t> caps;
    if (pattern) {
      caps = orderPeakBytes(input, *pattern);
    } else {
      for (const std::int64_t bytes : perMb) caps.push_back(static_cast<std::int64_t>(p) * bytes);
    }
    options.capBytes = IdVector<std::int64_t>(caps);
    auto greedy = greedyOrder(input, options);
    std::optional<std::vector<std::vector<OrderedOp>>> best;
    OrderTiming bestTiming;
    auto consider = [&](std::vector<std::vector<OrderedOp>>&& order) {
      const OrderTiming t = timeOrder(input, order);
      if (!t.ok) return;
      for (std::size_t d = 0; d < caps.size() && d < t.peakBytes.size(); ++d) {
        if (t.peakBytes[d] > caps[d]) return;
      }
      if (!best || fasterThan(t, bestTiming)) {
        best = std::move(order);
        bestTiming = t;
      }
    };
    if (pattern) consider(std::move(*pattern));
    if (greedy) consider(std::move(greedy->devices));
    if (!best)
      return Error{"v-1f1b: no order of " + std::to_string(m) + " microbatches on " + std::to_string(p) +
                   " devices keeps its activation budget"};
    out.devices = std::move(*best);
    return out;
  }
};

}  // namespace

std::unique_ptr<ScheduleGenerator> makeVOneFOneB() { return std::make_unique<VOneFOneB>(); }

}  // namespace pipestudio::schedules
