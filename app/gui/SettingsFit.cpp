#include "SettingsFit.hpp"

#include <algorithm>
#include <array>
#include <tuple>
#include <vector>

#include "GuiText.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Schedules.hpp"

namespace pipestudio::gui {

namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }

/// `value` and its divisors below it, largest first: the degrees a lowered setting may take.
std::vector<int> divisorsDescending(int value) {
  std::vector<int> out;
  for (int d = std::max(1, value); d >= 1; --d) {
    if (value % d == 0) out.push_back(d);
  }
  return out;
}

bool resolves(const ModelSpec& model, const ClusterSpec& cluster, const PlanConfig& config) {
  return resolveRequest(PlanRequest{model, cluster, config}).hasValue();
}

bool hasFrozenComponents(const ModelSpec& model) {
  return std::any_of(model.components.begin(), model.components.end(), [](const Component& c) { return !c.trainable; });
}

/// TP, CP and EP lowered together as little as possible (fewest degrees changed, then the
/// largest product) so that the model's layers divide them; false when no combination does.
bool lowerDegrees(PlanConfig& config, const ModelSpec& model, const ClusterSpec& cluster, QStringList& changes) {
  Parallelism& par = config.parallel;
  const Parallelism original = par;
  std::tuple<int, long long> best{-1, 0};
  std::array<int, 3> bestDegrees{};
  for (const int t : divisorsDescending(original.tensor)) {
    for (const int c : divisorsDescending(original.context)) {
      for (const int e : divisorsDescending(original.expert)) {
        par.tensor = t;
        par.context = c;
        par.expert = e;
        if (!resolves(model, cluster, config)) continue;
        const int kept = (t == original.tensor) + (c == original.context) + (e == original.expert);
        const std::tuple<int, long long> score{kept, static_cast<long long>(t) * c * e};
        if (score > best) {
          best = score;
          bestDegrees = {t, c, e};
        }
      }
    }
  }
  if (std::get<0>(best) < 0) {
    par = original;
    return false;
  }
  par.tensor = bestDegrees[0];
  par.context = bestDegrees[1];
  par.expert = bestDegrees[2];
  const std::array<std::tuple<const char*, int, int>, 3> degrees{{{"TP", original.tensor, par.tensor},
                                                                  {"CP", original.context, par.context},
                                                                  {"EP", original.expert, par.expert}}};
  for (const auto& [name, before, after] : degrees) {
    if (before != after)
      changes << QStringLiteral("%1 %2 → %3 (the model's layers do not divide %2)")
                     .arg(QString::fromLatin1(name))
                     .arg(before)
                     .arg(after);
  }
  if (par.tensor == 1) par.sequenceParallel = false;
  return true;
}

}  // namespace

bool hasExperts(const ModelSpec& model) {
  for (const Component& component : model.components) {
    for (const Layer& layer : component.layers) {
      if (layer.transformer && layer.transformer->isMoe()) return true;
    }
  }
  return false;
}

void resetMoeSettings(PlanConfig& config) {
  const Parallelism defaults;
  Parallelism& par = config.parallel;
  par.expert = defaults.expert;
  par.expertTensor = defaults.expertTensor;
  par.moeCapacityFactor = defaults.moeCapacityFactor;
  par.moeA2aOverlap = defaults.moeA2aOverlap;
  par.moeSharedExpertOverlap = defaults.moeSharedExpertOverlap;
  par.moeFlexDispatcher = defaults.moeFlexDispatcher;
  par.moeFlexBackend = defaults.moeFlexBackend;
  par.moeCommSms = defaults.moeCommSms;
  par.moePermuteFusionIntoDispatcher = defaults.moePermuteFusionIntoDispatcher;
  par.moeCombineChunkTokens = defaults.moeCombineChunkTokens;
  par.moeRankCapacityFactor = defaults.moeRankCapacityFactor;
  par.moePagedStash = defaults.moePagedStash;
  par.moePagedStashBufferFactor = defaults.moePagedStashBufferFactor;
}

FittedSettings fitSettingsToModel(const PlanConfig& config, const ModelSpec& model, const ClusterSpec& cluster) {
  FittedSettings fit{config, {}, {}};
  PlanConfig& c = fit.config;
  if (!hasExperts(model)) {
    PlanConfig dense = c;
    resetMoeSettings(dense);
    if (!(dense.parallel == c.parallel)) {
      fit.changes
          << (c.parallel.expert > 1
                  ? QStringLiteral("EP %1 → 1 and the MoE settings reset (a dense model)").arg(c.parallel.expert)
                  : QStringLiteral("the MoE settings reset (a dense model)"));
      c = dense;
    }
  }
  if (!hasFrozenComponents(model)) {
    // DiffusionPipe and the greedy fill place frozen components into bubbles: nothing to place.
    if (c.partition == "diffusionpipe") {
      fit.changes << QStringLiteral("Partition diffusionpipe → balanced (the model has no frozen components)");
      c.partition = "balanced";
    }
    if (c.fill == "greedy") {
      fit.changes << QStringLiteral("Fill greedy → none (the model has no frozen components)");
      c.fill = "none";
    }
  }
  if (c.globalBatch && model.globalBatch && *c.globalBatch != *model.globalBatch) {
    fit.changes
        << QStringLiteral("Global batch %1 → %2 (the model's recipe)").arg(*c.globalBatch).arg(*model.globalBatch);
    c.globalBatch = model.globalBatch;
  }
  if (const QString chunks = fitChunksToSchedule(c, c.schedule); !chunks.isEmpty()) fit.changes << chunks;
  if (auto resolved = resolveRequest(PlanRequest{model, cluster, c}); !resolved) {
    if (!lowerDegrees(c, model, cluster, fit.changes)) fit.kept = summaryLine(withFieldNames(q(resolved.message())));
  }
  return fit;
}

QString fitChunksToSchedule(PlanConfig& config, const std::string& previous) {
  const ScheduleGenerator* now = findScheduleGenerator(config.schedule);
  if (!now) return {};
  const ScheduleGenerator* before = findScheduleGenerator(previous);
  const ScheduleShape shape{config.devices, config.microbatches, config.chunksPerDevice, config.seqSplits};
  const bool refused = !now->validate(shape);
  const bool wasDefault = before && before != now && config.chunksPerDevice == before->defaultChunksPerDevice();
  const int target = now->defaultChunksPerDevice();
  if ((!refused && !wasDefault) || target == config.chunksPerDevice) return {};
  const int old = config.chunksPerDevice;
  config.chunksPerDevice = target;
  return QStringLiteral("Chunks / device %1 → %2 (%3's default)").arg(old).arg(target).arg(q(config.schedule));
}

}  // namespace pipestudio::gui
