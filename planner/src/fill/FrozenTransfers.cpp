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

FrozenTransfers frozenTransfers(const Plan& timed) {
  FrozenTransfers out;
  const ModelSpec& model = timed.model;
  const std::vector<int> frozen = model.frozenComponents();
  const int m = timed.config.microbatches;
  const int devices = timed.config.devices;
  if (frozen.empty() || timed.config.fill == "none" || m <= 0 || devices <= 0 || timed.ops.empty()) return out;
  const double samplesPerMb = static_cast<double>(std::max<std::int64_t>(1, model.samplesPerMicrobatch));
  const auto mu = static_cast<std::size_t>(m);
  double firstMs = timed.ops.front().startMs;
  double lastMs = timed.ops.front().endMs;
  for (const Op& op : timed.ops) {
    firstMs = std::min(firstMs, op.startMs);
    lastMs = std::max(lastMs, op.endMs);
  }
  const double periodMs = lastMs - firstMs;  // steady state: iteration k+1 is this one shifted by it

  struct Producer {
    int stage = 0;
    double endMs = -1;
    double samples = 0;
  };
  std::map<std::tuple<int, int, int>, Producer> producers;  // (component, microbatch, device)
  std::vector<double> fStart(timed.virtualStages.size() * mu, -1);
  for (const Op& op : timed.ops) {
    if (!validStage(timed, op.virtualStage) || op.microbatch < 0 || op.microbatch >= m) continue;
    if (op.device < 0 || op.device >= devices) continue;
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
  std::vector<Pending> pending;
  for (int c : frozen) {
    const std::vector<int> consumerStages = frozenConsumerStagesOf(timed, c);
    const std::int64_t bytes = frozenOutputBytes(model, timed.cluster, c);
    for (const auto& [key, p] : producers) {
      if (std::get<0>(key) != c) continue;
      const int mb = std::get<1>(key);
      const int pd = std::get<2>(key);
      std::map<int, double> firstUse;  // consumer device → earliest F start of this microbatch
      for (int s : consumerStages) {
        const int dc = timed.stage(s).device;
        const double t = fStart[static_cast<std::size_t>(s) * mu + static_cast<std::size_t>(mb)];
        if (dc < 0 || dc >= devices || t < 0) continue;
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
  for (const Pending& t : pending) {
    auto& iv = busy[{t.from, t.to}];
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
