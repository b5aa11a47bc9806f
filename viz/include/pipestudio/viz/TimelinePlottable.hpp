#pragma once
/// \file One QCustomPlot plottable that draws every op and transfer of a plan (STYLE.md, "The
/// timeline"): per-lane vectors sorted by start, blocks skipped outside the visible range,
/// sub-pixel intervals merged into one column per pixel, one drawRects per colour without
/// antialiasing, labels only where they fit. A second, small plottable draws the overlays
/// (hover, dependency chain, critical path) on a buffered layer of its own.

#include <array>
#include <memory>
#include <vector>

#include <QColor>
#include <QHash>
#include <QStaticText>

#include "pipestudio/viz/Qcp.hpp"
#include "pipestudio/viz/TimelineData.hpp"

namespace pipestudio::viz {

/// Colours of the timeline; light and dark variants follow the application palette.
struct TimelinePalette {
  std::array<QColor, kShadeCount> shades;  ///< ColourSlot * 2 + (microbatch & 1)
  QColor laneBackground;
  QColor bubbleHatch;
  QColor textOnDark;
  QColor textOnLight;
  QColor hover;
  QColor chain;
  QColor critical;
  static TimelinePalette light();
  static TimelinePalette dark();
  /// Dark when the window colour is dark (follows the system palette).
  static TimelinePalette forPalette(const QPalette& palette);
  QColor colour(ColourSlot slot, int microbatch = 0) const {
    return shades[static_cast<std::size_t>(static_cast<int>(slot) * 2 + (microbatch & 1))];
  }
};

/// What the last draw() did (for tests and the bench).
struct TimelineDrawStats {
  std::size_t visibleItems = 0;
  std::size_t rects = 0;
  std::size_t drawCalls = 0;
  std::size_t labels = 0;
};

class TimelinePlottable : public QCPAbstractPlottable {
  Q_OBJECT
 public:
  TimelinePlottable(QCPAxis* keyAxis, QCPAxis* valueAxis);

  void setTimeline(std::shared_ptr<const TimelineData> data);
  const TimelineData* timeline() const { return m_data.get(); }
  std::shared_ptr<const TimelineData> timelinePtr() const { return m_data; }
  void setTimelinePalette(const TimelinePalette& palette);
  const TimelinePalette& timelinePalette() const { return m_palette; }

  /// The interval at a pixel position of the plot (tolerance: a few pixels horizontally).
  ItemRef itemAt(const QPointF& pixel, double tolerancePx = 2.0) const;
  /// Pixel rectangle of an item (for overlays and tests).
  QRectF itemRect(ItemRef ref) const;

  const TimelineDrawStats& lastDrawStats() const { return m_stats; }

  double selectTest(const QPointF& pos, bool onlySelectable, QVariant* details = nullptr) const override;
  QCPRange getKeyRange(bool& foundRange, QCP::SignDomain inSignDomain = QCP::sdBoth) const override;
  QCPRange getValueRange(bool& foundRange, QCP::SignDomain inSignDomain = QCP::sdBoth,
                         const QCPRange& inKeyRange = QCPRange()) const override;

 protected:
  void draw(QCPPainter* painter) override;
  void drawLegendIcon(QCPPainter* painter, const QRectF& rect) const override;

 private:
  struct Label {
    QRect rect;
    std::int32_t microbatch;
    std::uint8_t shade;
  };
  const QStaticText& labelText(std::int32_t microbatch);

  std::shared_ptr<const TimelineData> m_data;
  TimelinePalette m_palette;
  std::array<std::vector<QRect>, kShadeCount> m_buckets;  // reused between draws
  std::vector<QRect> m_hatch;
  std::vector<Label> m_labels;
  QHash<std::int32_t, QStaticText> m_labelCache;
  TimelineDrawStats m_stats;
};

/// Outlines drawn over the timeline: the hovered item, the clicked op's dependency chain and
/// the iteration's critical path. Lives on its own buffered layer so a hover only repaints it.
class TimelineOverlay : public QCPAbstractPlottable {
  Q_OBJECT
 public:
  explicit TimelineOverlay(TimelinePlottable* timeline);

  void setHover(ItemRef ref);
  void setChain(std::vector<int> ops, int selectedOp);
  void setCriticalPath(std::vector<int> ops);
  ItemRef hover() const { return m_hover; }
  const std::vector<int>& chain() const { return m_chain; }
  const std::vector<int>& criticalPath() const { return m_critical; }
  int selectedOp() const { return m_selected; }

  double selectTest(const QPointF&, bool, QVariant* = nullptr) const override { return -1; }
  QCPRange getKeyRange(bool& foundRange, QCP::SignDomain = QCP::sdBoth) const override;
  QCPRange getValueRange(bool& foundRange, QCP::SignDomain = QCP::sdBoth, const QCPRange& = QCPRange()) const override;

 protected:
  void draw(QCPPainter* painter) override;
  void drawLegendIcon(QCPPainter*, const QRectF&) const override {}

 private:
  TimelinePlottable* m_timeline;
  ItemRef m_hover;
  std::vector<int> m_chain;
  std::vector<int> m_critical;
  int m_selected = -1;
};

}  // namespace pipestudio::viz
