#pragma once
/// \file Two plans stacked on one time axis (baseline on top) with the diff tables below.
///
/// The current side may be a measured run (issue 29): it is labelled as measured (what ran it,
/// on how many devices, when), its GPU activity is drawn on lanes per device and stream when it
/// has no op ranges, and where its clock is not comparable with the plan's (a CPU run of a GPU
/// plan) it is drawn scaled to the plan's length with a note saying so; the tables keep the
/// measured times. The run-vs-plan tables (per device, per op kind, drift) follow the summary.

#include <QWidget>
#include <memory>
#include <optional>
#include <vector>

#include "pipestudio/plan/Plan.hpp"
#include "pipestudio/viz/Qcp.hpp"
#include "pipestudio/viz/ReportTable.hpp"
#include "pipestudio/viz/TimelineData.hpp"

class QCheckBox;
class QLabel;
class QTabWidget;
class QTableView;

namespace pipestudio::viz {

class TimelinePlot;
class TimelinePlottable;
class TimelineLegend;
class TimeAxisTicker;
class CompareModel;

/// What the compare view knows of a measured run beyond its op ranges.
struct MeasuredRun {
  QString label;                                  ///< "run 12 · measured on cpu · 4 devices · 2025-11-26 17:40"
  std::shared_ptr<const ActivityTrace> activity;  ///< GPU activity of runs without op ranges
  double lengthMs = 0;                            ///< one measured iteration, as measured
  bool scaleByDefault = false;                    ///< its clock is not the plan's (another backend, or far off)
  int iterations = 0;
  struct Device {
    int device = 0;
    double busyMs = 0;  ///< per iteration, as measured
    double idleMs = 0;
  };
  std::vector<Device> devices;
  std::vector<ReportTable> tables;  ///< per device, per op kind, drift
};

class CompareView : public QWidget {
  Q_OBJECT
 public:
  explicit CompareView(QWidget* parent = nullptr);

  /// Two plans (either may be null). `currentMeasured`: the current side is a measured run
  /// without a MeasuredRun description (a trace file, a run opened from the history): the
  /// sides read Plan / Measured.
  void setPlans(std::shared_ptr<const Plan> baseline, std::shared_ptr<const Plan> current,
                bool currentMeasured = false);
  /// A plan and a measured run of it (`current` may hold no ops: `run.activity` is drawn).
  void setMeasured(std::shared_ptr<const Plan> plan, std::shared_ptr<const Plan> current, MeasuredRun run);
  std::shared_ptr<const Plan> baseline() const { return m_baseline; }
  std::shared_ptr<const Plan> current() const { return m_current; }
  const MeasuredRun* measured() const { return m_measured ? &*m_measured : nullptr; }
  /// Draws the measured run scaled to the plan's length (drawn time = measured × scale()).
  void setScaleMeasured(bool scale);
  double scale() const { return m_scale; }
  /// The visible line above the plots saying what the current side is and how it is drawn.
  QString note() const;
  QCheckBox* scaleBox() const { return m_scaleBox; }
  QTabWidget* tables() const { return m_tables; }
  CompareModel* model() const { return m_model; }
  TimelinePlot* plot() const { return m_plot; }
  TimelinePlottable* currentTimeline() const { return m_currentTimeline; }
  QString currentTitle() const;
  QCPRange visibleRange() const;
  void fitToView();
  bool exportImage(const QString& path, int width, int height);

 private:
  void onRangeChanged(const QCPRange& range);
  void rebuild();
  void rebuildTables();

  TimelinePlot* m_plot = nullptr;
  QCPAxisRect* m_top = nullptr;
  QCPAxisRect* m_bottom = nullptr;
  TimelinePlottable* m_baselineTimeline = nullptr;
  TimelinePlottable* m_currentTimeline = nullptr;
  QCPTextElement* m_topTitle = nullptr;
  QCPTextElement* m_bottomTitle = nullptr;
  TimelineLegend* m_legend = nullptr;
  QSharedPointer<TimeAxisTicker> m_topTicker;
  QSharedPointer<TimeAxisTicker> m_bottomTicker;
  CompareModel* m_model = nullptr;
  QTableView* m_table = nullptr;
  QTabWidget* m_tables = nullptr;
  QLabel* m_note = nullptr;
  QCheckBox* m_scaleBox = nullptr;
  std::shared_ptr<const Plan> m_baseline;
  std::shared_ptr<const Plan> m_current;
  std::optional<MeasuredRun> m_measured;
  double m_scale = 1.0;
  bool m_currentMeasured = false;
  bool m_syncing = false;
};

/// `plan` with every op and transfer time multiplied by `factor`.
Plan scaledPlan(const Plan& plan, double factor);

}  // namespace pipestudio::viz
