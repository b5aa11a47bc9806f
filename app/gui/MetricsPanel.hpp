#pragma once
// The Metrics dock: the plan's summary (schedule, layout, makespan, iteration, bubble,
// throughput, MFU, peak memory; Δ against the pinned baseline), the per-device memory breakdown
// and the per-device table.

#include <QWidget>
#include <memory>

#include "pipestudio/plan/Plan.hpp"

class QLabel;

namespace pipestudio::viz {
class MetricsModel;
class MemoryBreakdownView;
}  // namespace pipestudio::viz

namespace pipestudio::gui {

class MetricsPanel : public QWidget {
  Q_OBJECT
 public:
  explicit MetricsPanel(QWidget* parent = nullptr);
  /// The plan on screen and what it is compared with (either may be null): the pinned baseline,
  /// or (`pinned` false) the plan of the current settings a measured run is compared with.
  void setPlans(const std::shared_ptr<const Plan>& plan, const std::shared_ptr<const Plan>& baseline,
                bool pinned = true);
  /// The numbers are of a plan that does not match the settings (`label` says why, as the
  /// timeline's banner does): a banner over them; empty clears it.
  void setStale(const QString& label);
  QLabel* staleBanner() const { return m_stale; }
  /// Summary HTML of `plan` against `baseline`.
  static QString summaryHtml(const Plan* plan, const Plan* baseline, bool pinned = true);

  QLabel* summary() const { return m_summary; }
  viz::MetricsModel* model() const { return m_model; }
  viz::MemoryBreakdownView* breakdown() const { return m_breakdown; }

 private:
  QLabel* m_summary = nullptr;
  QLabel* m_stale = nullptr;
  viz::MetricsModel* m_model = nullptr;
  viz::MemoryBreakdownView* m_breakdown = nullptr;
};

}  // namespace pipestudio::gui
