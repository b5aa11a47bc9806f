// Cross-iteration transfers of frozen outputs (issue 4): timed on their links after the
// simulation. The dependencies themselves are derived in core/plan (Dependencies.hpp).
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/plan/Dependencies.hpp"
#include "pipestudio/planner/Fill.hpp"

namespace pipestudio {

namespace {

// The last layer of a frozen component on one device, per microbatch: its last N's stage and
// end, and the samples it ran.
struct Producer {
  int stage = 0;
  double endMs = -1;
  double samples = 0;
};
using Producers = std::map<std::tuple<int, int, int>, Producer>;  // (component, microbatch, device)

// A frozen output to send to a consumer device before the consumer's F of the next iteration.
struct Pending {
  double readyMs;
  int component;
  int microbatch;
  int from;
  int to;
  int stage;
  std::int64_t bytes;
  double deadlineMs;
};

// The ops' first start to last end: in the steady state iteration k+1 is this one shifted by it.
double iterationPeriodMs(const Plan& timed) {
  double firstMs = timed.ops.front().startMs;
  double lastMs = timed.ops.front().endMs;
  for (const Op& op : timed.ops) {
    firstMs = std::min(firstMs, op.startMs);
    lastMs = std::max(lastMs, op.endMs);
  }
  return lastMs - firstMs;
}

// The producers of the frozen outputs, and every F's start per (stage, microbatch) (−1: none)
// into fStart.
Producers frozenProducers(const Plan& timed, double samplesPerMb, std::vector<double>& fStart) {
  const ModelSpec& model = timed.model;
  const int m = timed.config.microbatches;
  const auto mu = static_cast<std::size_t>(m);
  Producers producers;
  fStart.assign(timed.virtualStages.size() * mu, -1);
  for (const Op& op : timed.ops) {
    if (!validStage(timed, op.virtualStage) || op.microbatch < 0 || op.microbatch >= m) continue;
    if (op.device < 0 || op.device >= timed.config.devices) continue;
    const VirtualStage& vs = timed.stage(op.virtualStage);
    const Component& comp = model.component(vs.component);
    if (op.kind == OpKind::F) {
      fStart[static_cast<std::size_t>(op.virtualStage) * mu + static_cast<std::size_t>(op.microbatch)] = op.startMs;
    }
    if (op.kind != OpKind::N || comp.trainable || vs.lastLayer + 1 != static_cast<int>(comp.layers.size())) continue;
    Producer& p = producers[{vs.component, op.microbatch, op.device}];
    if (op.endMs >= p.endMs) {
      p.endMs = op.endMs;
      p.stage = op.virtualStage;
    }
    p.samples += op.samples > 0 ? op.samples : samplesPerMb;
  }
  return producers;
}

// Every frozen output that must cross to another device, ordered by when it is ready; an
// output used on its own device only raises the lateness.
std::vector<Pending> pendingTransfers(const Plan& timed, const Producers& producers, const std::vector<double>& fStart,
                                      double samplesPerMb, FrozenTransfers& out) {
  const auto mu = static_cast<std::size_t>(timed.config.microbatches);
  const double periodMs = iterationPeriodMs(timed);
  std::vector<Pending> pending;
  for (int c : timed.model.frozenComponents()) {
    const std::vector<int> consumerStages = frozenConsumerStagesOf(timed, c);
    const std::int64_t bytes = frozenOutputBytes(timed.model, timed.cluster, c);
    for (const auto& [key, p] : producers) {
      if (std::get<0>(key) != c) continue;
      const int mb = std::get<1>(key);
      const int pd = std::get<2>(key);
      std::map<int, double> firstUse;  // consumer device → earliest F start of this microbatch
      for (int s : consumerStages) {
        const int dc = timed.stage(s).device;
        const double t = fStart[static_cast<std::size_t>(s) * mu + static_cast<std::size_t>(mb)];
        if (dc < 0 || dc >= timed.config.devices || t < 0) continue;
        auto it = firstUse.find(dc);
        if (it == firstUse.end())
          firstUse.emplace(dc, t);
        else
          it->second = std::min(it->second, t);
      }
      const auto share = static_cast<std::int64_t>(std::llround(static_cast<double>(bytes) * p.samples / samplesPerMb));
      for (const auto& [dc, useMs] : firstUse) {
        const double deadlineMs = useMs + periodMs;  // the consumer's F in the next iteration
        if (dc == pd) {
          out.latenessMs = std::max(out.latenessMs, p.endMs - deadlineMs);
          continue;
        }
        pending.push_back({p.endMs, c, mb, pd, dc, p.stage, share, deadlineMs});
      }
    }
  }
  std::sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) {
    return std::tie(a.readyMs, a.component, a.microbatch, a.from, a.to) <
           std::tie(b.readyMs, b.component, b.microbatch, b.from, b.to);
  });
  return pending;
}

// The transfer in the first idle window of its link (`iv`, sorted busy intervals) after its data
// is ready, marked busy.
Comm placeTransfer(const Plan& timed, const Pending& t, std::vector<std::pair<double, double>>& iv) {
  const double durMs = deviceTransferMs(timed.cluster, timed.config, t.from, t.to, static_cast<double>(t.bytes));
  double startMs = t.readyMs;
  std::size_t pos = 0;
  for (; pos < iv.size(); ++pos) {
    if (iv[pos].second <= startMs) continue;
    if (iv[pos].first >= startMs + durMs) break;  // fits in the window before this transfer
    startMs = iv[pos].second;
  }
  iv.insert(iv.begin() + static_cast<std::ptrdiff_t>(pos), {startMs, startMs + durMs});
  Comm c;
  c.fromDevice = t.from;
  c.toDevice = t.to;
  c.microbatch = t.microbatch;
  c.kind = OpKind::N;
  c.virtualStage = t.stage;
  c.startMs = startMs;
  c.endMs = startMs + durMs;
  c.bytes = t.bytes;
  return c;
}

}  // namespace

FrozenTransfers frozenTransfers(const Plan& timed) {
  FrozenTransfers out;
  const ModelSpec& model = timed.model;
  const int m = timed.config.microbatches;
  const int devices = timed.config.devices;
  if (model.frozenComponents().empty() || timed.config.fill == "none" || m <= 0 || devices <= 0 || timed.ops.empty())
    return out;
  const double samplesPerMb = static_cast<double>(std::max<std::int64_t>(1, model.samplesPerMicrobatch));
  std::vector<double> fStart;  // per (stage, microbatch)
  const Producers producers = frozenProducers(timed, samplesPerMb, fStart);
  if (producers.empty()) return out;

  // Link occupancy of the backbone's own transfers (the simulator's, first come first
  // served); frozen transfers take the first idle window after their data is ready, so they
  // never delay backbone traffic (they are off the iteration's critical path).
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> busy;
  // (Kind N comms are this function's own output when the plan already carries them.)
  for (const Comm& c : timed.comms) {
    if (c.kind != OpKind::N) busy[{c.fromDevice, c.toDevice}].emplace_back(c.startMs, c.endMs);
  }
  for (auto& [link, iv] : busy) std::sort(iv.begin(), iv.end());
  for (const Pending& t : pendingTransfers(timed, producers, fStart, samplesPerMb, out)) {
    const Comm c = placeTransfer(timed, t, busy[{t.from, t.to}]);
    out.comms.push_back(c);
    out.latenessMs = std::max(out.latenessMs, c.endMs - t.deadlineMs);
  }
  return out;
}

void appendFrozenTransfers(Plan& timed) {
  if (timed.model.frozenComponents().empty()) return;  // the common case: nothing to name or add
  // The simulator names a transfer F or B; one leaving a frozen stage carries N output.
  for (Comm& c : timed.comms) {
    if (!validStage(timed, c.virtualStage)) continue;
    const int comp = timed.stage(c.virtualStage).component;
    if (!timed.model.component(comp).trainable) c.kind = OpKind::N;
  }
  FrozenTransfers t = frozenTransfers(timed);
  timed.comms.insert(timed.comms.end(), t.comms.begin(), t.comms.end());
}

}  // namespace pipestudio
