#include "pipestudio/viz/MetricsModel.hpp"

#include <QBrush>
#include <QColor>
#include <algorithm>
#include <cmath>

#include "pipestudio/common/Units.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/viz/CompareView.hpp"

namespace pipestudio::viz {

namespace {

/// A cell of this flat table (quietly false for the invalid indexes views and testers probe).
bool isCell(const QAbstractItemModel* model, const QModelIndex& index) {
  return index.isValid() && index.model() == model && !index.parent().isValid() && index.row() < model->rowCount() &&
         index.column() < model->columnCount();
}

QString bytesText(double bytes) { return QString::fromStdString(formatBytes(bytes)); }
QString msText(double ms) { return QString::fromStdString(formatMs(ms)); }

}  // namespace

Metrics metricsOf(const Plan& plan) {
  if (plan.metrics.makespanMs > 0 && !plan.metrics.devices.empty()) return plan.metrics;
  return computeMetrics(plan);
}

MetricsModel::MetricsModel(QObject* parent) : QAbstractTableModel(parent) {}

void MetricsModel::setPlan(const std::shared_ptr<const Plan>& plan) {
  beginResetModel();
  m_metrics = plan ? metricsOf(*plan) : Metrics{};
  endResetModel();
}

int MetricsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_metrics.devices.size());
}

int MetricsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant MetricsModel::data(const QModelIndex& index, int role) const {
  if (!isCell(this, index)) return {};
  const DeviceMetrics& d = m_metrics.devices[static_cast<std::size_t>(index.row())];
  const double idle = std::max(0.0, d.spanMs - d.busyMs);
  const double bubble = d.spanMs > 0 ? idle / d.spanMs : 0.0;
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case Device:
        return QStringLiteral("GPU %1").arg(index.row());
      case BusyMs:
        return msText(d.busyMs);
      case IdleMs:
        return msText(idle);
      case BubblePercent:
        return QStringLiteral("%1 %").arg(bubble * 100.0, 0, 'f', 1);
      case PeakMemory:
        return bytesText(static_cast<double>(d.peakMemoryBytes));
      case PeakActivations:
        return bytesText(static_cast<double>(d.peakActivationBytes));
      default:
        return {};
    }
  }
  if (role == Qt::UserRole) {  // raw numbers for sorting and tests
    switch (index.column()) {
      case Device:
        return index.row();
      case BusyMs:
        return d.busyMs;
      case IdleMs:
        return idle;
      case BubblePercent:
        return bubble;
      case PeakMemory:
        return static_cast<qlonglong>(d.peakMemoryBytes);
      case PeakActivations:
        return static_cast<qlonglong>(d.peakActivationBytes);
      default:
        return {};
    }
  }
  if (role == Qt::TextAlignmentRole && index.column() != Device)
    return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
  return {};
}

QVariant MetricsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole || orientation != Qt::Horizontal) return {};
  switch (section) {
    case Device:
      return QStringLiteral("Device");
    case BusyMs:
      return QStringLiteral("Busy");
    case IdleMs:
      return QStringLiteral("Idle");
    case BubblePercent:
      return QStringLiteral("Bubble");
    case PeakMemory:
      return QStringLiteral("Peak memory");
    case PeakActivations:
      return QStringLiteral("Peak activations");
    default:
      return {};
  }
}

CompareModel::CompareModel(QObject* parent) : QAbstractTableModel(parent) {}

void CompareModel::setPlans(const std::shared_ptr<const Plan>& baseline, const std::shared_ptr<const Plan>& current,
                            const MeasuredRun* measured, bool currentMeasured) {
  beginResetModel();
  m_rows.clear();
  m_measured = currentMeasured || measured != nullptr;
  const Metrics a = baseline ? metricsOf(*baseline) : Metrics{};
  const Metrics b = current ? metricsOf(*current) : Metrics{};
  const bool hasA = baseline != nullptr;
  const bool hasB = current != nullptr;
  // A measured run: what it measured per iteration stands for the current side.
  const bool perIteration = measured && !measured->devices.empty();
  const bool opRanges = current && !current->ops.empty();
  auto peak = [](const Metrics& m) {
    std::int64_t p = 0;
    for (const auto& d : m.devices) p = std::max(p, d.peakMemoryBytes);
    return static_cast<double>(p);
  };
  if (measured) {
    m_rows.push_back({QStringLiteral("Iteration (plan: makespan)"), Unit::Ms, a.makespanMs,
                      measured->lengthMs > 0 ? measured->lengthMs : b.makespanMs, hasA, hasB, true});
    if (measured->iterations > 0)
      m_rows.push_back({QStringLiteral("Iterations measured"), Unit::Count, 0,
                        static_cast<double>(measured->iterations), false, true, true});
  } else {
    m_rows.push_back({QStringLiteral("Makespan"), Unit::Ms, a.makespanMs, b.makespanMs, hasA, hasB, true});
  }
  double measuredBubble = b.bubbleRatio;
  if (perIteration) {
    double busy = 0, total = 0;
    for (const MeasuredRun::Device& d : measured->devices) {
      busy += d.busyMs;
      total += d.busyMs + d.idleMs;
    }
    measuredBubble = total > 0 ? 1.0 - busy / total : 0.0;
  }
  m_rows.push_back({QStringLiteral("Bubble ratio"), Unit::Ratio, a.bubbleRatio, measuredBubble, hasA,
                    hasB && (opRanges || perIteration), true});
  m_rows.push_back({QStringLiteral("Throughput"), Unit::Throughput, a.throughputSamplesPerS, b.throughputSamplesPerS,
                    hasA, hasB && !measured, false});
  m_rows.push_back({QStringLiteral("Peak memory"), Unit::Bytes, peak(a), peak(b), hasA, hasB && !measured, true});
  std::size_t devices = std::max(a.devices.size(), b.devices.size());
  if (perIteration) {
    for (const MeasuredRun::Device& d : measured->devices)
      devices = std::max(devices, static_cast<std::size_t>(d.device + 1));
  }
  for (std::size_t d = 0; d < devices; ++d) {
    const bool inA = d < a.devices.size();
    bool inB = d < b.devices.size();
    const DeviceMetrics da = inA ? a.devices[d] : DeviceMetrics{};
    DeviceMetrics db = inB ? b.devices[d] : DeviceMetrics{};
    double idleB = std::max(0.0, db.spanMs - db.busyMs);
    if (perIteration) {
      inB = false;
      for (const MeasuredRun::Device& m : measured->devices) {
        if (m.device != static_cast<int>(d)) continue;
        inB = true;
        db.busyMs = m.busyMs;
        idleB = m.idleMs;
      }
    }
    const QString name = QStringLiteral("GPU %1 ").arg(d);
    const QString per = measured ? QStringLiteral(" / iteration") : QString();
    // Busy time of the same work: more is slower (worse), as idle time is.
    m_rows.push_back({name + QStringLiteral("busy") + per, Unit::Ms, da.busyMs, db.busyMs, inA, inB, true});
    m_rows.push_back(
        {name + QStringLiteral("idle") + per, Unit::Ms, std::max(0.0, da.spanMs - da.busyMs), idleB, inA, inB, true});
    if (!measured) {
      m_rows.push_back({name + QStringLiteral("peak memory"), Unit::Bytes, static_cast<double>(da.peakMemoryBytes),
                        static_cast<double>(db.peakMemoryBytes), inA, inB, true});
    }
  }
  endResetModel();
}

QString CompareModel::percentText(double delta, double baseline) {
  // Against a baseline of (nearly) nothing a ratio means nothing ("+4.9e16 %" helps nobody).
  if (std::abs(baseline) <= 1e-9 || std::abs(delta) > 1e6 * std::abs(baseline)) return QStringLiteral("n/a");
  return QStringLiteral("%1%2 %")
      .arg(delta >= 0 ? QStringLiteral("+") : QString())
      .arg(100.0 * delta / std::abs(baseline), 0, 'f', 1);
}

int CompareModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}

int CompareModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant CompareModel::data(const QModelIndex& index, int role) const {
  if (!isCell(this, index)) return {};
  const Row& row = m_rows[static_cast<std::size_t>(index.row())];
  auto text = [&](double v) -> QString {
    switch (row.unit) {
      case Unit::Ms:
        return msText(v);
      case Unit::Ratio:
        return QStringLiteral("%1 %").arg(v * 100.0, 0, 'f', 2);
      case Unit::Bytes:
        return bytesText(v);
      case Unit::Throughput:
        return QStringLiteral("%1 samples/s").arg(v, 0, 'f', 1);
      case Unit::Count:
        return QString::number(v, 'f', 0);
    }
    return {};
  };
  const double delta = row.current - row.baseline;
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case Quantity:
        return row.name;
      case Baseline:
        return row.hasBaseline ? text(row.baseline) : QStringLiteral("—");
      case Current:
        return row.hasCurrent ? text(row.current) : QStringLiteral("—");
      case Delta: {
        if (!row.hasBaseline || !row.hasCurrent) return QStringLiteral("—");
        QString d = (delta >= 0 ? QStringLiteral("+") : QString()) + text(delta);
        if (row.unit == Unit::Bytes && delta < 0) d = QStringLiteral("−") + bytesText(-delta);
        if (row.unit != Unit::Ratio) d += QStringLiteral(" (%1)").arg(percentText(delta, row.baseline));
        return d;
      }
      default:
        return {};
    }
  }
  if (role == Qt::UserRole) {
    switch (index.column()) {
      case Baseline:
        return row.baseline;
      case Current:
        return row.current;
      case Delta:
        return delta;
      default:
        return row.name;
    }
  }
  if (role == Qt::ForegroundRole && index.column() == Delta && row.hasBaseline && row.hasCurrent) {
    const double tolerance = 1e-9 * std::max(1.0, std::abs(row.baseline));
    if (std::abs(delta) <= tolerance) return {};
    const bool better = row.lowerIsBetter ? delta < 0 : delta > 0;
    return QBrush(better ? QColor(0x2e, 0x9d, 0x4a) : QColor(0xd0, 0x3a, 0x3a));
  }
  if (role == Qt::TextAlignmentRole && index.column() != Quantity)
    return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
  return {};
}

QVariant CompareModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole || orientation != Qt::Horizontal) return {};
  switch (section) {
    case Quantity:
      return QStringLiteral("Quantity");
    case Baseline:
      return m_measured ? QStringLiteral("Plan") : QStringLiteral("Baseline");
    case Current:
      return m_measured ? QStringLiteral("Measured") : QStringLiteral("Current");
    case Delta:
      return QStringLiteral("Δ");
    default:
      return {};
  }
}

QString layoutText(const PlanConfig& c) {
  const Parallelism& par = c.parallel;
  QString layout = QStringLiteral("PP %1").arg(c.devices);
  if (par.tensor > 1) layout += QStringLiteral(" × TP %1").arg(par.tensor);
  if (par.context > 1) layout += QStringLiteral(" × CP %1").arg(par.context);
  if (par.data > 1) layout += QStringLiteral(" × DP %1").arg(par.data);
  return layout;
}

QString layoutWithExpertsText(const PlanConfig& c) {
  if (c.parallel.expert <= 1) return layoutText(c);
  return layoutText(c) + QStringLiteral(" (EP %1)").arg(c.parallel.expert);
}

}  // namespace pipestudio::viz
