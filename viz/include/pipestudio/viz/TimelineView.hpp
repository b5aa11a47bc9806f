#pragma once
/// \file The timeline widget: the ops of a plan (one lane per device, transfers as a sub-lane)
/// above the per-device memory curve, both on one time axis in ms. Wheel zooms, drag pans,
/// Shift+drag zooms to a rubber band, double-click fits; hovering shows what an op waited for,
/// a click highlights its dependency chain.

#include <memory>

#include <QString>
#include <QWidget>

#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/Plan.hpp"
#include "pipestudio/viz/Qcp.hpp"
#include "pipestudio/viz/TimelineData.hpp"

namespace pipestudio::viz {

class TimelinePlottable;
class TimelineOverlay;

/// QCustomPlot with the mouse handling of the timeline (drag pans, Shift+drag rubber band).
class TimelinePlot : public QCustomPlot {
  Q_OBJECT
 public:
  explicit TimelinePlot(QWidget* parent = nullptr);

 Q_SIGNALS:
  void hoverMoved(QPointF pixel);
  void clicked(QPointF pixel);
  void rubberBandZoom(QRect pixels);

 protected:
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void leaveEvent(QEvent* event) override;

 private:
  QPoint m_pressPos;
  bool m_pressed = false;
};

/// Configures one axis rect as a timeline: devices on a reversed value axis, ms on the keys.
void setupTimelineAxes(QCPAxisRect* rect, int devices);

class TimelineView : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineView(QWidget* parent = nullptr);
  ~TimelineView() override;

  /// Shows `plan` (nullptr clears). Keeps the visible range when `keepRange` and the plan is
  /// of similar length (re-solves while editing do not jump).
  void setPlan(std::shared_ptr<const Plan> plan, bool keepRange = false);
  std::shared_ptr<const Plan> plan() const;
  const TimelineData* timeline() const;

  TimelinePlot* plot() const { return m_plot; }
  TimelinePlottable* plottable() const { return m_timeline; }
  TimelineOverlay* overlay() const { return m_overlay; }
  QCPAxisRect* timelineRect() const { return m_timelineRect; }
  QCPAxisRect* memoryRect() const { return m_memoryRect; }

  /// Visible time window in ms (the key range of both plots).
  QCPRange visibleRange() const;
  void setVisibleRange(double fromMs, double toMs);
  /// Zooms by `factor` (< 1 zooms in) about `centerMs`.
  void zoom(double factor, double centerMs);
  void zoom(double factor);
  /// Shifts the window by `deltaMs`.
  void pan(double deltaMs);

  /// Memory limit line (bytes; 0 hides it).
  void setMemoryLimit(std::int64_t bytes);
  void setMemoryVisible(bool visible);
  void setShowCriticalPath(bool show);
  bool showCriticalPath() const { return m_showCritical; }
  /// Selects an op (highlights its dependency chain); -1 clears.
  void selectOp(int op);
  int selectedOp() const;

  /// Writes the plot to PNG, SVG, PDF or JPG by suffix; width/height 0 use the widget size.
  bool exportImage(const QString& path, int width = 0, int height = 0);

  /// Re-applies colours from the current application palette (dark/light).
  void applyPalette();

 public Q_SLOTS:
  void fitToView();

 Q_SIGNALS:
  /// Tooltip text of the item under the mouse ("" when none): the status bar shows it.
  void hovered(const QString& text);
  void opSelected(int op);
  void visibleRangeChanged(double fromMs, double toMs);

 protected:
  void changeEvent(QEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;

 private:
  void onHover(QPointF pixel);
  void onClick(QPointF pixel);
  void onKeyRangeChanged(const QCPRange& range);
  void rebuildMemory();
  void requestReplot();

  TimelinePlot* m_plot = nullptr;
  QCPAxisRect* m_timelineRect = nullptr;
  QCPAxisRect* m_memoryRect = nullptr;
  TimelinePlottable* m_timeline = nullptr;
  TimelineOverlay* m_overlay = nullptr;
  QCPItemStraightLine* m_limitLine = nullptr;
  QCPGraph* m_peaks = nullptr;
  std::vector<QCPGraph*> m_memoryGraphs;
  std::shared_ptr<const TimelineData> m_data;
  std::int64_t m_memoryLimitBytes = 0;
  bool m_showCritical = true;
  bool m_syncing = false;
};

}  // namespace pipestudio::viz
