#pragma once
/// \file One QCustomPlot plottable that draws every op and transfer of a plan (docs/style.md, "The
/// timeline"): per-lane vectors sorted by start, blocks skipped outside the visible range,
/// sub-pixel intervals merged into one column per pixel, one drawRects per colour without
/// antialiasing, labels only where they fit. A second, small plottable draws the overlays
/// (hover, dependency chain, critical path) on a buffered layer of its own.

#include <QColor>
#include <array>
#include <memory>
#include <vector>

#include "pipestudio/viz/Qcp.hpp"
#include "pipestudio/viz/TimelineData.hpp"

namespace pipestudio::viz {

namespace tracks {
class Canvas;
}

/// Colours of the timeline; light and dark variants follow the application palette.
struct TimelinePalette {
  std::array<QColor, kShadeCount> shades;  ///< ColourSlot * kShadesPerSlot + variant
  QColor laneBackground;
  QColor bubbleHatch;
  QColor textOnDark;
  QColor textOnLight;
  QColor hover;
  QColor chain;
  QColor critical;
  QColor measure;  ///< range measurement band
  /// A shade faded towards the lane background (ops outside a search, a stale plan).
  QColor faded(std::size_t shade) const;
  static TimelinePalette light();
  static TimelinePalette dark();
  /// The label colour on `background` (light text on dark shades).
  QColor textOn(const QColor& background) const;
  /// Dark when the window colour is dark (follows the system palette).
  static TimelinePalette forPalette(const QPalette& palette);
  QColor colour(ColourSlot slot, int microbatch = 0) const {
    const std::size_t odd = (microbatch & 1) != 0 ? 1 : 0;
    return shades[kShadesPerSlot * static_cast<std::size_t>(slot) + odd];
  }
  /// The shade of `variant` (a chunk of an interleaved plan: chunk % kShadesPerSlot).
  QColor shade(ColourSlot slot, int variant) const {
    return shades[kShadesPerSlot * static_cast<std::size_t>(slot) +
                  static_cast<std::size_t>(variant & (kShadesPerSlot - 1))];
  }
};

/// What the last draw() did (for tests and the bench).
struct TimelineDrawStats {
  std::size_t visibleItems = 0;
  std::size_t rects = 0;
  std::size_t drawCalls = 0;
  std::size_t labels = 0;
  std::int64_t hatchedPixels = 0;  ///< summed width of the idle hatching drawn
};

class TimelinePlottable : public QCPAbstractPlottable {
  Q_OBJECT
 public:
  TimelinePlottable(QCPAxis* keyAxis, QCPAxis* valueAxis);
  ~TimelinePlottable() override;

  void setTimeline(std::shared_ptr<const TimelineData> data);
  const TimelineData* timeline() const { return m_data.get(); }
  void setTimelinePalette(const TimelinePalette& palette);
  const TimelinePalette& timelinePalette() const { return m_palette; }
  /// Ops whose entry is 0 are drawn faded (search/filter); empty: every op in full colour.
  /// Transfers fade whenever a mask is set.
  void setOpMask(IdVector<char> mask);
  const IdVector<char>& opMask() const { return m_mask; }
  /// Draws everything faded (a plan that no longer matches the inputs).
  void setDimmed(bool dimmed) { m_dimmed = dimmed; }
  bool dimmed() const { return m_dimmed; }

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
  std::shared_ptr<const TimelineData> m_data;
  TimelinePalette m_palette;
  IdVector<char> m_mask;  ///< by op
  bool m_dimmed = false;
  std::unique_ptr<tracks::Canvas> m_canvas;  ///< what a frame draws; reused between frames
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
  /// Arrows from the selected op's predecessors to it and from it to its successors.
  void setArrows(std::vector<int> predecessors, std::vector<int> successors);
  /// Outlines of search matches (drawn only where the op is at least a few pixels wide).
  void setMatches(std::vector<int> ops);
  /// The measured time range (NaN: none).
  void setMeasuredRange(double fromMs, double toMs);
  ItemRef hover() const { return m_hover; }
  const std::vector<int>& arrowSources() const { return m_predecessors; }
  const std::vector<int>& arrowTargets() const { return m_successors; }
  const std::vector<int>& matches() const { return m_matches; }
  /// Pen width the critical path was last drawn with (thin at full view), for tests.
  double lastCriticalPenWidth() const { return m_lastCriticalPen; }
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
  std::vector<int> m_predecessors;
  std::vector<int> m_successors;
  std::vector<int> m_matches;
  double m_measureFromMs;
  double m_measureToMs;
  double m_lastCriticalPen = 0;
  int m_selected = -1;
};

/// The timeline's legend as a layout element of the plot, so PNG/SVG/PDF exports carry it:
/// op kinds present in the plan (F, B, W, BW, N — "next iteration" when frozen work is filled
/// across iterations —, S, T, OPT), transfers, bubble hatching, critical path, selected
/// microbatch. Wraps into as many rows as its width needs.
class TimelineLegend : public QCPLayoutElement {
  Q_OBJECT
 public:
  explicit TimelineLegend(QCustomPlot* plot, TimelinePlottable* timeline);
  /// Rebuilds the entries from the timeline's plan.
  void updateEntries();
  /// Takes its entries (and colours) from another timeline (the compare view's two plans).
  void setTimelineSource(TimelinePlottable* timeline) {
    m_timeline = timeline;
    updateEntries();
  }
  QStringList entryNames() const;
  /// Whether the overlay entries (critical path, selected microbatch) are listed: only where
  /// the plot draws them.
  void setOverlayEntries(bool shown) {
    m_overlayEntries = shown;
    updateEntries();
  }
  QSize minimumOuterSizeHint() const override;

 protected:
  void draw(QCPPainter* painter) override;

 private:
  enum class Swatch { Fill, Hatch, Outline, Dashed };
  struct Entry {
    QString text;
    Swatch swatch = Swatch::Fill;
    QColor colour;
    QColor second;
  };
  int rowsFor(int width) const;
  TimelinePlottable* m_timeline;
  std::vector<Entry> m_entries;
  int m_rows = 1;
  bool m_overlayEntries = true;
};

}  // namespace pipestudio::viz
