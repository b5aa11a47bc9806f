#pragma once
// What each kind of track draws (the drawing half of TimelineTracks.hpp): compute lanes
// (OpLanes: lane background, idle hatching, ops), transfer strips (TransferLanes: transfers
// only), GPU activity lanes (KernelLanes: background, kernels) and the iteration markers of a
// measured run. TimelinePlottable::draw asks each lane's painter to collect its shapes into a
// Canvas, which paints them in one drawRects per colour (docs/style.md, "The timeline"):
//
//   const Frame frame = Frame::of(*keyAxis, clipRect());
//   canvas.begin(font, maxMicrobatch, fade);
//   for (const Lane& lane : data.lanes()) painterFor(lane).collect(lane, frame, rows, canvas);
//   canvas.paint(painter, palette);
#include <QFont>
#include <QHash>
#include <QRect>
#include <QStaticText>
#include <array>
#include <vector>

#include "pipestudio/viz/TimelinePlottable.hpp"

namespace pipestudio::viz::tracks {

/// One frame of the timeline: the visible window and its mapping from time to pixels.
struct Frame {
  QRect clip;
  double x0 = 0;  ///< linear key axis: pixel = x0 + (t - lower) * scale
  double lower = 0;
  double scale = 1;
  double pxLeft = 0;  ///< pixels are clamped a little outside the clip
  double pxRight = 0;
  double visLo = 0;  ///< the visible window in ms
  double visHi = 0;
  static Frame of(const QCPAxis& keyAxis, const QRect& clip);
  double toPx(double t) const;
};

/// The pixel rows a lane covers in a frame.
struct Rows {
  int top = 0;
  int height = 0;
};

/// How the frame fades intervals: everything (a stale plan), or the ops a mask leaves out.
struct Fade {
  bool all = false;
  const IdVector<char>* mask = nullptr;  ///< by op; null or empty: no mask
};

/// The shapes of one frame, collected lane by lane, painted without antialiasing in one
/// drawRects per colour: lane backgrounds, idle hatching, intervals (sub-pixel ones merged into
/// one column per pixel, coloured by the longest), microbatch labels where they fit.
class Canvas {
 public:
  /// Starts a frame: labels are measured in `font` and must fit `maxMicrobatch`'s digits.
  void begin(const QFont& font, int maxMicrobatch, Fade fade);
  void background(const Frame& frame, Rows rows);
  /// Hatches [fromMs, toMs] of the rows (idle time), where it is a pixel or wider.
  void hatch(const Frame& frame, Rows rows, double fromMs, double toMs);
  /// The lane's intervals inside the frame (blocks outside it skipped whole).
  void intervals(const Lane& lane, const Frame& frame, Rows rows);
  void paint(QCPPainter* painter, const TimelinePalette& palette);
  const TimelineDrawStats& stats() const { return m_stats; }
  /// Forgets the cached label texts (a new plan).
  void clearLabelCache() { m_labelCache.clear(); }

 private:
  struct Label {
    QRect rect;
    std::int32_t microbatch;
    std::uint8_t shade;
  };
  /// Run-length state of one lane's rectangles.
  struct Run {
    std::uint8_t shade = 0;
    int right = 0;
    std::size_t index = 0;
  };
  std::uint8_t fadedShade(std::uint8_t shade, ItemRef item) const;
  void emitRect(Run& run, Rows rows, std::uint8_t shade, int left, int right);
  const QStaticText& labelText(std::int32_t microbatch);

  Fade m_fade;
  int m_textHeight = 0;
  int m_labelMinWidth = 0;  ///< a label needs this many pixels (its digits and a margin)
  std::vector<QRect> m_backgrounds;
  std::vector<QRect> m_hatch;
  /// Full shades first, then their faded variants (kShadeCount + shade); reused between frames.
  std::array<std::vector<QRect>, std::size_t{2} * kShadeCount> m_buckets;
  std::vector<Label> m_labels;
  QHash<std::int32_t, QStaticText> m_labelCache;
  TimelineDrawStats m_stats;
};

/// What a lane of one kind of track draws in a frame.
class TrackPainter {
 public:
  virtual ~TrackPainter() = default;
  virtual void collect(const Lane& lane, const Frame& frame, Rows rows, Canvas& canvas) const = 0;
};

/// Compute lanes: background, idle time inside the device's span hatched as bubble, the ops.
class OpLanes final : public TrackPainter {
 public:
  void collect(const Lane& lane, const Frame& frame, Rows rows, Canvas& canvas) const override;
};

/// Transfer strips: the transfers and host copies, on no background.
class TransferLanes final : public TrackPainter {
 public:
  void collect(const Lane& lane, const Frame& frame, Rows rows, Canvas& canvas) const override;
};

/// GPU activity lanes of a measured run: background and kernels (no bubble: idle is unknown).
class KernelLanes final : public TrackPainter {
 public:
  void collect(const Lane& lane, const Frame& frame, Rows rows, Canvas& canvas) const override;
};

/// The painter of a lane's kind.
const TrackPainter& painterFor(const Lane& lane);

/// Measured runs: where each iteration (ProfilerStep#N) begins, a dashed line and its name.
class IterationMarkers {
 public:
  static void draw(QCPPainter* painter, const Frame& frame, const ActivityTrace* activity,
                   const TimelinePalette& palette);
};

}  // namespace pipestudio::viz::tracks
