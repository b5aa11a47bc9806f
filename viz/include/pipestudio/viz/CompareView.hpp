#pragma once
/// \file Two plans stacked on one time axis (baseline on top) with the diff table below.

#include <QWidget>
#include <memory>

#include "pipestudio/plan/Plan.hpp"
#include "pipestudio/viz/Qcp.hpp"

class QTableView;
class QLabel;

namespace pipestudio::viz {

class TimelinePlot;
class TimelinePlottable;
class TimelineLegend;
class TimeAxisTicker;
class CompareModel;

class CompareView : public QWidget {
  Q_OBJECT
 public:
  explicit CompareView(QWidget* parent = nullptr);

  void setPlans(std::shared_ptr<const Plan> baseline, std::shared_ptr<const Plan> current);
  std::shared_ptr<const Plan> baseline() const { return m_baseline; }
  std::shared_ptr<const Plan> current() const { return m_current; }
  CompareModel* model() const { return m_model; }
  TimelinePlot* plot() const { return m_plot; }
  QCPRange visibleRange() const;
  void fitToView();
  bool exportImage(const QString& path, int width, int height);

 private:
  void onRangeChanged(const QCPRange& range);

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
  std::shared_ptr<const Plan> m_baseline;
  std::shared_ptr<const Plan> m_current;
  bool m_syncing = false;
};

}  // namespace pipestudio::viz
