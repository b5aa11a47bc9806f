#pragma once
/// \file The timeline widget: the ops of a plan (one lane per device, sub-lanes for a second
/// pipeline and for transfers) above the per-device memory curve, both on one time axis whose
/// labels switch between µs, ms and s. A legend strip (and an optional title line) sits above
/// the lanes and goes into every export.
///
/// Mouse: wheel zooms time about the cursor (by the wheel's whole delta), Ctrl+wheel zooms the
/// lanes, Shift+wheel scrolls them; drag pans, Shift+drag zooms to a rubber band, Ctrl+drag
/// measures a range (duration and idle time per device), double-click fits. Hover shows what
/// an op waited for and highlights that device's memory curve; a click selects the op: its
/// dependency chain is outlined and arrows join it to its predecessors and successors.
/// Keys: W/S or +/- zoom about the mouse, A/D or ←/→ pan, ↑/↓ scroll lanes, Shift+↑/↓ zoom
/// lanes, F fits the selection (0 everything), C collapses each device to one lane, Ctrl+F
/// searches ("mb 7", "W", "vs 12"), Esc clears selection, search and measurement.

#include <QString>
#include <QWidget>
#include <limits>
#include <memory>
#include <optional>

#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/Plan.hpp"
#include "pipestudio/viz/Qcp.hpp"
#include "pipestudio/viz/TimelineData.hpp"

class QLineEdit;
class QLabel;
class QScrollBar;

namespace pipestudio::viz {

class TimelinePlottable;
class TimelineOverlay;
class TimelineLegend;
class MemoryTrack;

/// QCustomPlot with the mouse handling of the timeline (drag pans, Shift+drag rubber band,
/// Ctrl+drag measures, wheel zoom by the event's whole delta).
class TimelinePlot : public QCustomPlot {
  Q_OBJECT
 public:
  explicit TimelinePlot(QWidget* parent = nullptr);
  /// Wheel handling is the owner's (TimelineView); plots without an owner keep QCustomPlot's.
  void setWheelHandledByOwner(bool owner) { m_ownerWheel = owner; }

 Q_SIGNALS:
  void hoverMoved(QPointF pixel);
  void clicked(QPointF pixel);
  void rubberBandZoom(QRect pixels);
  /// Ctrl+drag: the range between the press and the current x (finished on release).
  void measureDragged(double fromPx, double toPx, bool finished);
  /// A drag (pan or rubber band) moved past the click threshold.
  void dragged();
  /// Wheel steps (120 = one notch; pixel deltas converted), at `pixel`, with modifiers.
  void wheelSteps(double steps, QPointF pixel, Qt::KeyboardModifiers modifiers);

 protected:
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void leaveEvent(QEvent* event) override;

 private:
  QPoint m_pressPos;
  bool m_pressed = false;
  bool m_measuring = false;
  bool m_ownerWheel = false;
};

/// Time axis labels in the unit that suits the visible window: µs below 2 ms, s above 20 s,
/// else ms.
class TimeAxisTicker : public QCPAxisTicker {
 public:
  enum class Unit { Us, Ms, S };
  static Unit unitFor(double windowMs);
  static QString unitName(Unit unit);
  void setWindow(double windowMs) { m_unit = unitFor(windowMs); }
  Unit unit() const { return m_unit; }

 protected:
  QString getTickLabel(double tick, const QLocale& locale, QChar formatChar, int precision) override;
  double getTickStep(const QCPRange& range) override;

 private:
  Unit m_unit = Unit::Ms;
  double m_stepInUnit = 1;
};

/// Configures one axis rect as a timeline: devices on a reversed value axis, ms on the keys.
void setupTimelineAxes(QCPAxisRect* rect, int devices);

class TimelineView : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineView(QWidget* parent = nullptr);
  ~TimelineView() override;

  /// Shows `plan` (nullptr clears) with the GPU activity of a measured run, if any, on lanes
  /// per device and stream. The view is refitted unless the user has zoomed or panned since the
  /// last fit and `keepRange` is set and the plan is of similar length.
  void setPlan(std::shared_ptr<const Plan> plan, bool keepRange = false,
               std::shared_ptr<const ActivityTrace> activity = nullptr);
  /// One lane per device (pipes, streams and transfers folded into it), or every sub-lane.
  void setLanesCollapsed(bool collapsed);
  bool lanesCollapsed() const { return m_collapsed; }
  std::shared_ptr<const Plan> plan() const;
  const TimelineData* timeline() const;

  TimelinePlot* plot() const { return m_plot; }
  TimelinePlottable* plottable() const { return m_timeline; }
  TimelineOverlay* overlay() const { return m_overlay; }
  TimelineLegend* legend() const { return m_legend; }
  QCPAxisRect* timelineRect() const { return m_timelineRect; }
  QCPAxisRect* memoryRect() const { return m_memoryRect; }
  QScrollBar* laneScrollBar() const { return m_laneScroll; }
  QLineEdit* searchField() const { return m_search; }
  const std::vector<QCPGraph*>& memoryGraphs() const;

  /// Visible time window in ms (the key range of both plots).
  QCPRange visibleRange() const;
  void setVisibleRange(double fromMs, double toMs);
  /// Zooms by `factor` (< 1 zooms in) about `centerMs`.
  void zoom(double factor, double centerMs);
  /// Zooms about the mouse when it is over the lanes (W/S, +/-), else about the centre.
  void zoom(double factor);
  /// Fits what is selected: the selected op (with its neighbours' room around it), else the
  /// measured range, else everything (the F key).
  void fitSelection();
  /// Shifts the window by `deltaMs`.
  void pan(double deltaMs);
  /// True once the user zoomed or panned since the last fit (a re-solve then keeps the view).
  bool userZoomed() const { return m_userZoomed; }

  /// Visible lanes as a device range [from, to) on the value axis.
  QCPRange visibleLanes() const;
  void setVisibleLanes(double fromDevice, double toDevice);
  /// Zooms the lanes by `factor` (< 1 shows fewer, taller lanes) about device `center`.
  void zoomLanes(double factor, double center);
  void scrollLanes(double deltaDevices);
  /// Lane labels currently on the axis (for tests: which lanes are named).
  QStringList laneLabels() const;

  /// Memory limit line (bytes; 0 hides it). The line is always drawn when set.
  void setMemoryLimit(std::int64_t bytes);
  void setMemoryVisible(bool visible);
  /// Hides or shows one device's memory curve (the memory legend's click does this).
  void setMemoryCurveVisible(int device, bool visible);
  /// Read-out of the memory plot at a pixel ("GPU 2: 15.47 GiB at 131 ms …"), also shown in
  /// the plot; highlights that curve. Empty when no curve is near.
  QString memoryReadout(QPointF pixel);
  /// What the memory plot says of the limit: "limit 80.00 GiB" on the scale, or "… ↑ (above the
  /// scale)" when the curves are far below it; empty without a limit.
  QString memoryLimitLabel() const;
  int highlightedMemoryCurve() const;
  void setShowCriticalPath(bool show);
  bool showCriticalPath() const { return m_showCritical; }

  /// Selects an op (outlines its dependency chain, arrows to its neighbours); -1 clears.
  void selectOp(int op);
  int selectedOp() const;
  /// Pans and scrolls so `op` is on screen (keeps the zoom when it fits).
  void revealOp(int op);

  /// Filters the timeline: ops not matching `query` fade. Returns an error for a bad query;
  /// an empty query clears the filter.
  std::optional<QString> setSearch(const QString& query);
  const std::vector<int>& searchMatches() const { return m_matches; }
  /// Moves to the next match (reveals and selects it); false when there is none.
  bool nextMatch();

  /// Measures [fromMs, toMs] (also what Ctrl+drag does); NaN clears.
  void measureRange(double fromMs, double toMs);
  const std::optional<RangeMeasurement>& measurement() const { return m_measurement; }

  /// Marks the plan on screen as not matching the inputs: `label` over it ("last good plan:
  /// zb-h1 · current settings failed: …"), dimmed unless `dim` is false (a transient state
  /// such as a running solve). Empty clears.
  void setStale(const QString& label, bool dim = true);
  QString staleLabel() const { return m_staleText; }
  /// The banner as drawn: the label wrapped to the lanes' width.
  QString staleBannerText() const;
  bool isStale() const { return !m_staleText.isEmpty(); }

  /// Title line: model, cluster, schedule, makespan, bubble (built from the plan).
  QString titleText() const;
  void setTitleVisible(bool visible);
  bool titleVisible() const;

  /// Writes the plot to PNG, SVG, PDF or JPG by suffix; width/height 0 use the widget size.
  /// The legend is always included; `withTitle` adds the title line.
  bool exportImage(const QString& path, int width = 0, int height = 0, bool withTitle = true);

  /// Re-applies colours from the current application palette (dark/light).
  void applyPalette();

 public Q_SLOTS:
  void fitToView();
  void showSearch();

 Q_SIGNALS:
  /// Tooltip text of the item under the mouse ("" when none): the status bar shows it.
  void hovered(const QString& text);
  void opSelected(int op);
  void visibleRangeChanged(double fromMs, double toMs);
  void rangeMeasured(const pipestudio::viz::RangeMeasurement& measurement);
  void searchChanged(const QString& summary);

 protected:
  void changeEvent(QEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  void onHover(QPointF pixel);
  void onClick(QPointF pixel);
  void onWheel(double steps, QPointF pixel, Qt::KeyboardModifiers modifiers);
  void onKeyRangeChanged(const QCPRange& range);
  void onValueRangeChanged(const QCPRange& range);
  void applyKeyRange(double fromMs, double toMs);
  void updateLaneTicks();
  void fitLanes();
  void updateLaneScrollBar();
  void updateTitle();
  void layoutStaleBanner();
  void requestReplot();
  QWidget* buildSearchBar();
  void buildPlotLayout();
  void setupAxes();
  void connectPlot();

  TimelinePlot* m_plot = nullptr;
  QScrollBar* m_laneScroll = nullptr;
  QWidget* m_searchBar = nullptr;
  QLineEdit* m_search = nullptr;
  QLabel* m_searchSummary = nullptr;
  QCPTextElement* m_title = nullptr;
  TimelineLegend* m_legend = nullptr;
  QCPAxisRect* m_timelineRect = nullptr;
  QCPAxisRect* m_memoryRect = nullptr;
  TimelinePlottable* m_timeline = nullptr;
  TimelineOverlay* m_overlay = nullptr;
  QSharedPointer<TimeAxisTicker> m_timeTicker;
  QSharedPointer<TimeAxisTicker> m_memoryTimeTicker;
  QSharedPointer<QCPAxisTickerText> m_laneTicker;
  QCPItemText* m_staleItem = nullptr;
  std::unique_ptr<MemoryTrack> m_memory;  ///< the memory curves under the lanes
  std::shared_ptr<const TimelineData> m_data;
  std::vector<int> m_matches;
  std::size_t m_nextMatch = 0;
  std::optional<RangeMeasurement> m_measurement;
  QString m_staleText;
  bool m_showCritical = true;
  bool m_syncing = false;
  bool m_fitting = false;
  bool m_userZoomed = false;
  bool m_userLanes = false;
  bool m_titleVisible = false;
  bool m_collapsed = false;
  double m_cursorMs = std::numeric_limits<double>::quiet_NaN();  ///< time under the mouse; NaN: not over the lanes
  std::shared_ptr<const ActivityTrace> m_activity;
};

}  // namespace pipestudio::viz
