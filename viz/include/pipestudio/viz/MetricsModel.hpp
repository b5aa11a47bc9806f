#pragma once
/// \file Table models over plan metrics: per-device busy/idle/peak of one plan, and the diff of
/// two plans (baseline vs current) that the compare view and the metrics panel show.

#include <QAbstractTableModel>
#include <memory>

#include "pipestudio/plan/Plan.hpp"

namespace pipestudio::viz {

/// One row per device: busy, idle (span − busy), bubble share of the span, peak memory,
/// peak activations. Metrics come from the plan (computeMetrics when the plan has none).
class MetricsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Device, BusyMs, IdleMs, BubblePercent, PeakMemory, PeakActivations, ColumnCount };
  explicit MetricsModel(QObject* parent = nullptr);
  void setPlan(const std::shared_ptr<const Plan>& plan);
  const Metrics& metrics() const { return m_metrics; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  Metrics m_metrics;
};

struct MeasuredRun;

/// Baseline vs current: rows for makespan, bubble ratio, throughput, peak memory, then per
/// device busy, idle and peak memory; columns baseline, current, delta. The delta is red where
/// the current is worse (slower, busier for the same work, fuller) and green where better; its
/// percentage says "n/a" against a baseline of (nearly) zero. Against a measured run the current
/// column holds what was measured per iteration (its own times, whatever the drawing's scale).
class CompareModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Quantity, Baseline, Current, Delta, ColumnCount };
  explicit CompareModel(QObject* parent = nullptr);
  /// `currentMeasured`: the current side is a measured run (the columns read Plan / Measured);
  /// implied by `measured`.
  void setPlans(const std::shared_ptr<const Plan>& baseline, const std::shared_ptr<const Plan>& current,
                const MeasuredRun* measured = nullptr, bool currentMeasured = false);
  /// The percentage of `delta` against `baseline` ("+3.1 %"), or "n/a" when the baseline is
  /// (nearly) zero.
  static QString percentText(double delta, double baseline);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  enum class Unit { Ms, Ratio, Bytes, Throughput, Count };
  struct Row {
    QString name;
    Unit unit = Unit::Ms;
    double baseline = 0;
    double current = 0;
    bool hasBaseline = false;
    bool hasCurrent = false;
    bool lowerIsBetter = true;
  };
  const std::vector<Row>& rows() const { return m_rows; }

 private:
  std::vector<Row> m_rows;
  bool m_measured = false;
};

/// Metrics of a plan: stored ones when present, else computed (docs/formats.md definitions).
Metrics metricsOf(const Plan& plan);

/// A plan's parallel layout as the views name it, "PP 4 × TP 2 × CP 2 × DP 8" (degrees of 1 left
/// out): the Metrics dock, the compare view's titles and the Configure dock's rows.
QString layoutText(const PlanConfig& config);
/// layoutText with " (EP 8)" where experts are split (their group lies inside the data-parallel one).
QString layoutWithExpertsText(const PlanConfig& config);

}  // namespace pipestudio::viz
