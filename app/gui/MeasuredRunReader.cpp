#include "MeasuredRunReader.hpp"

#include <QDateTime>
#include <QStringList>
#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "pipestudio/common/Try.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/history/Compare.hpp"
#include "pipestudio/viz/MetricsModel.hpp"

namespace pipestudio::gui {

namespace {

using Tone = viz::ReportTable::Tone;
using Cell = viz::ReportTable::Cell;

constexpr double kNsPerMs = 1e6;
/// A measured value this much above or below the planned one is coloured worse or better.
constexpr double kToneThreshold = 0.05;

QString q(const std::string& s) { return QString::fromStdString(s); }

Cell text(const QString& t) { return {t, {}, Tone::Neutral}; }
Cell number(int v) { return {QString::number(v), v, Tone::Neutral}; }
Cell ms(double v, Tone tone = Tone::Neutral) { return {q(formatMs(v)), v, tone}; }

/// Worse when `measured` exceeds `planned` by more than the threshold, better when below.
Tone toneOf(double measured, double planned) {
  if (planned <= 0) return Tone::Neutral;
  if (measured > planned * (1 + kToneThreshold)) return Tone::Worse;
  if (measured < planned * (1 - kToneThreshold)) return Tone::Better;
  return Tone::Neutral;
}

std::optional<viz::ActivityKind> activityKind(history::EventCategory category) {
  switch (category) {
    case history::EventCategory::Kernel:
      return viz::ActivityKind::Kernel;
    case history::EventCategory::Memcpy:
      return viz::ActivityKind::Memcpy;
    case history::EventCategory::Memset:
      return viz::ActivityKind::Memset;
    case history::EventCategory::Nccl:
      return viz::ActivityKind::Nccl;
    default:
      return std::nullopt;
  }
}

QString runLabel(const history::RunSummary& s) {
  QStringList parts{QStringLiteral("run %1").arg(s.id)};
  if (!s.backend.empty()) {
    parts << QStringLiteral("measured on %1%2")
                 .arg(q(s.backend), s.gpu.empty() ? QString() : QStringLiteral(" (%1)").arg(q(s.gpu)));
  } else {
    parts << QStringLiteral("imported %1").arg(s.source.empty() ? QStringLiteral("trace") : q(s.source));
  }
  parts << QStringLiteral("%1 device(s)").arg(s.devices);
  parts << QDateTime::fromMSecsSinceEpoch(s.createdUnixMs).toString(QStringLiteral("yyyy-MM-dd HH:mm"));
  return parts.join(QStringLiteral(" · "));
}

viz::ReportTable deviceTable(const history::PlanComparison& c) {
  viz::ReportTable t;
  t.title = QStringLiteral("Per device");
  t.headers = {QStringLiteral("GPU"),           QStringLiteral("planned busy"),    QStringLiteral("planned bubble"),
               QStringLiteral("measured busy"), QStringLiteral("measured bubble"), QStringLiteral("of it comm wait")};
  t.footnote = QStringLiteral("Per iteration (mean over %1 measured iteration(s)), as pipestudio-cli history compare")
                   .arg(c.iterations);
  for (const history::DeviceBubble& d : c.devices) {
    t.rows.push_back({number(d.device), ms(d.plannedBusyMs), ms(d.plannedBubbleMs),
                      ms(d.measuredBusyMs, toneOf(d.measuredBusyMs, d.plannedBusyMs)),
                      ms(d.measuredBubbleMs, toneOf(d.measuredBubbleMs, d.plannedBubbleMs)), ms(d.measuredCommWaitMs)});
  }
  return t;
}

viz::ReportTable kindTable(const history::PlanComparison& c) {
  viz::ReportTable t;
  t.title = QStringLiteral("Per op kind");
  t.headers = {QStringLiteral("kind"), QStringLiteral("ops"), QStringLiteral("planned mean"),
               QStringLiteral("measured mean"), QStringLiteral("Δ")};
  t.footnote = QStringLiteral("Mean duration of the matched ops of each kind");
  for (const history::KindComparison& k : c.byKind) {
    const double delta = k.measuredMs - k.plannedMs;
    t.rows.push_back({text(q(std::string(opKindName(k.kind)))),
                      number(k.count),
                      ms(k.plannedMs),
                      ms(k.measuredMs),
                      {(delta >= 0 ? QStringLiteral("+") : QString()) + q(formatMs(delta)) + QStringLiteral(" (") +
                           viz::CompareModel::percentText(delta, k.plannedMs) + QLatin1Char(')'),
                       delta, toneOf(k.measuredMs, k.plannedMs)}});
  }
  return t;
}

viz::ReportTable driftTable(const QString& title, const std::vector<history::OpDrift>& ops) {
  viz::ReportTable t;
  t.title = title;
  t.headers = {QStringLiteral("GPU"),     QStringLiteral("stage"),      QStringLiteral("kind"),
               QStringLiteral("mb"),      QStringLiteral("plan start"), QStringLiteral("measured start"),
               QStringLiteral("late by"), QStringLiteral("plan ms"),    QStringLiteral("measured ms")};
  t.footnote = QStringLiteral("Start times from the start of the plan / of each measured iteration, averaged");
  for (const history::OpDrift& d : ops) {
    t.rows.push_back({number(d.device), number(d.virtualStage), text(q(std::string(opKindName(d.kind)))),
                      number(d.microbatch), ms(d.plannedStartMs), ms(d.measuredStartMs),
                      ms(d.startDriftMs, d.startDriftMs > 0 ? Tone::Worse : Tone::Neutral), ms(d.plannedMs),
                      ms(d.measuredMs, toneOf(d.measuredMs, d.plannedMs))});
  }
  return t;
}

}  // namespace

viz::ActivityTrace activityOf(const std::vector<history::MeasuredEvent>& events) {
  viz::ActivityTrace trace;
  std::map<std::pair<int, std::int64_t>, std::size_t> streamIndex;
  std::unordered_map<std::string, std::int32_t> nameIndex;
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> deviceSteps;
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> hostSteps;
  std::int64_t first = INT64_MAX;
  for (const history::MeasuredEvent& e : events) {
    const std::int64_t end = e.startNs + std::max<std::int64_t>(0, e.durationNs);
    if (e.name.rfind("ProfilerStep#", 0) == 0 && activityKind(e.category) == std::nullopt) {
      auto& steps = e.device >= 0 ? deviceSteps : hostSteps;
      auto [it, inserted] = steps.try_emplace(e.name, e.startNs, end);
      if (!inserted) it->second = {std::min(it->second.first, e.startNs), std::max(it->second.second, end)};
      continue;
    }
    if (e.device < 0 || !activityKind(e.category)) continue;
    first = std::min(first, e.startNs);
  }
  const auto& steps = deviceSteps.empty() ? hostSteps : deviceSteps;
  std::vector<std::pair<std::pair<std::int64_t, std::int64_t>, std::string>> ordered;
  ordered.reserve(steps.size());
  for (const auto& [name, w] : steps) ordered.emplace_back(w, name);
  std::sort(ordered.begin(), ordered.end());
  const std::int64_t origin = !ordered.empty() ? ordered.front().first.first : (first == INT64_MAX ? 0 : first);
  auto toMs = [origin](std::int64_t ns) { return static_cast<double>(ns - origin) / kNsPerMs; };
  for (const auto& [w, name] : ordered) trace.iterations.push_back({name, toMs(w.first), toMs(w.second)});
  for (const history::MeasuredEvent& e : events) {
    const auto kind = activityKind(e.category);
    if (e.device < 0 || !kind) continue;
    auto [it, inserted] = streamIndex.try_emplace({e.device, e.stream}, trace.streams.size());
    if (inserted) trace.streams.push_back({e.device, e.stream, {}});
    auto [name, added] = nameIndex.try_emplace(e.name, static_cast<std::int32_t>(trace.names.size()));
    if (added) trace.names.push_back(e.name);
    trace.streams[it->second].events.push_back(
        {toMs(e.startNs), toMs(e.startNs + std::max<std::int64_t>(0, e.durationNs)), *kind, name->second});
  }
  // Streams in (device, stream) order, each stream's events by start.
  std::sort(trace.streams.begin(), trace.streams.end(),
            [](const auto& a, const auto& b) { return std::tie(a.device, a.stream) < std::tie(b.device, b.stream); });
  for (viz::ActivityStream& s : trace.streams) {
    std::sort(s.events.begin(), s.events.end(),
              [](const viz::ActivityEvent& a, const viz::ActivityEvent& b) { return a.startMs < b.startMs; });
  }
  return trace;
}

Expected<MeasuredRunView> readMeasuredRun(history::HistoryStore& store, history::RunId id) {
  PS_ASSIGN_OR_RETURN(auto summary, store.runSummary(id));
  MeasuredRunView view;
  view.id = id;
  if (summary.planId) {
    PS_ASSIGN_OR_RETURN(auto plan, store.loadPlan(*summary.planId));
    view.plan = std::make_shared<const Plan>(std::move(plan));
  }
  PS_ASSIGN_OR_RETURN(auto measured, store.runAsPlan(id, 0));
  view.measured = std::make_shared<const Plan>(std::move(measured));
  viz::MeasuredRun& run = view.run;
  run.label = runLabel(summary);
  if (view.measured->ops.empty()) {
    // No op ranges (a plain profiler trace): its GPU activity is what there is to see.
    PS_ASSIGN_OR_RETURN(auto events, store.loadEvents(id));
    auto activity = std::make_shared<viz::ActivityTrace>(activityOf(events));
    run.iterations = static_cast<int>(activity->iterations.size());
    if (!activity->iterations.empty()) {
      run.lengthMs = activity->iterations.front().endMs - activity->iterations.front().startMs;
    } else {
      for (const viz::ActivityStream& s : activity->streams) {
        for (const viz::ActivityEvent& e : s.events) run.lengthMs = std::max(run.lengthMs, e.endMs);
      }
    }
    run.activity = std::move(activity);
  } else {
    run.lengthMs = viz::metricsOf(*view.measured).makespanMs;
  }
  if (view.plan) {
    // Clocks that are not the plan's (another backend, or a length far from the plan's) are
    // drawn scaled by default; the view says so.
    const double planMs = viz::metricsOf(*view.plan).makespanMs;
    const double ratio = planMs > 0 ? run.lengthMs / planMs : 1.0;
    run.scaleByDefault = summary.backend == "cpu" || ratio < 0.5 || ratio > 2.0;
    if (auto c = history::compareRunToPlan(store, id)) {
      run.iterations = std::max(run.iterations, c->iterations);
      for (const history::DeviceBubble& d : c->devices)
        run.devices.push_back({d.device, d.measuredBusyMs, d.measuredBubbleMs});
      run.tables.push_back(deviceTable(*c));
      if (!c->byKind.empty()) run.tables.push_back(kindTable(*c));
      if (!c->latest.empty()) run.tables.push_back(driftTable(QStringLiteral("Started late"), c->latest));
      if (!c->mostDrifted.empty()) run.tables.push_back(driftTable(QStringLiteral("Most drifted"), c->mostDrifted));
    }
  }
  return view;
}

}  // namespace pipestudio::gui
