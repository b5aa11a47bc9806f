#pragma once
// The memory track under the timeline's lanes: one step curve per device (memoryTimeline of
// core/plan), its peaks, the memory limit (a line on the scale, or named above it when the
// curves are far below), a clickable legend for few devices, and the read-out of the curve
// under the mouse. TimelineView owns one in its memory axis rect.
#include <QPointF>
#include <QString>
#include <cstdint>
#include <functional>
#include <vector>

#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/viz/Qcp.hpp"
#include "pipestudio/viz/TimelineData.hpp"

namespace pipestudio::viz {

struct TimelinePalette;

/// A hidden text item on the "highlights" layer of `plot`, clipped to `rect` and placed at `at` in
/// the rect's ratio coordinates: the memory read-out and the timeline's stale-plan banner.
QCPItemText* hiddenRectText(QCustomPlot* plot, QCPAxisRect* rect, QPointF at, Qt::Alignment alignment,
                            const QMargins& padding);

class MemoryTrack {
 public:
  /// Adds its items to `plot` in `rect`; `replot` is called when a change needs drawing.
  MemoryTrack(QCustomPlot* plot, QCPAxisRect* rect, std::function<void()> replot);

  /// Rebuilds the curves from the plan of `data` (none: empty) and rescales.
  void rebuild(const TimelineData* data);
  /// The limit line (bytes; 0 hides it); takes effect on the next rebuild.
  void setLimit(std::int64_t bytes) { m_limitBytes = std::max<std::int64_t>(0, bytes); }
  /// What the plot says of the limit (see TimelineView::memoryLimitLabel).
  QString limitLabel() const;
  /// Hides or shows a device's curve; its legend entry's text fades in `text`'s colour.
  void setCurveVisible(int device, bool visible, QColor text);
  /// The device whose legend entry is `item`, or -1.
  int deviceOfLegendItem(QCPAbstractLegendItem* item) const;
  /// Highlights a device's curve (the others faded); -1 clears.
  void highlight(int device);
  int highlighted() const { return m_highlighted; }
  /// Read-out at a pixel of the plot; empty (and the read-out hidden) when no curve is near.
  QString readout(QPointF pixel);
  void applyPalette(const QPalette& palette, const TimelinePalette& timeline);
  const std::vector<QCPGraph*>& graphs() const { return m_graphs; }

 private:
  /// Scales the value axis to the curves (and the limit where it is near) and places the limit.
  void scaleToLimit(double maxGiB);

  QCustomPlot* m_plot;
  QCPAxisRect* m_rect;
  std::function<void()> m_replot;
  QCPGraph* m_peaks = nullptr;
  QCPItemStraightLine* m_limitLine = nullptr;
  QCPItemText* m_limitLabel = nullptr;
  QCPItemText* m_readout = nullptr;
  QCPLegend* m_legend = nullptr;
  std::vector<QCPGraph*> m_graphs;
  std::vector<QPen> m_pens;
  MemoryTimeline m_memory;
  std::int64_t m_limitBytes = 0;
  int m_highlighted = -1;
};

}  // namespace pipestudio::viz
