#include "TimelinePainters.hpp"

#include <QFontMetrics>
#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

namespace pipestudio::viz::tracks {

// --- Frame ---------------------------------------------------------------------------------

Frame Frame::of(const QCPAxis& keyAxis, const QRect& clip) {
  Frame f;
  const QCPRange range = keyAxis.range();
  f.clip = clip;
  // Linear key axis: the mapping is computed once instead of per item.
  f.x0 = keyAxis.coordToPixel(range.lower);
  const double x1 = keyAxis.coordToPixel(range.upper);
  f.lower = range.lower;
  f.scale = (x1 - f.x0) / std::max(1e-300, range.size());
  f.pxLeft = clip.left() - 2.0;
  f.pxRight = clip.right() + 2.0;
  f.visLo = std::min(range.lower, range.upper);
  f.visHi = std::max(range.lower, range.upper);
  return f;
}

double Frame::toPx(double t) const { return std::clamp(x0 + (t - lower) * scale, pxLeft, pxRight); }

// --- Canvas --------------------------------------------------------------------------------

void Canvas::begin(const QFont& font, int maxMicrobatch, Fade fade) {
  m_stats = {};
  m_fade = fade;
  for (auto& bucket : m_buckets) bucket.clear();
  m_hatch.clear();
  m_labels.clear();
  m_backgrounds.clear();
  const QFontMetrics metrics(font);
  m_textHeight = metrics.height();
  const int maxDigits = static_cast<int>(std::to_string(std::max(0, maxMicrobatch)).size());
  m_labelMinWidth = metrics.horizontalAdvance(QLatin1Char('0')) * maxDigits + 4;
}

void Canvas::background(const Frame& frame, Rows rows) {
  m_backgrounds.emplace_back(frame.clip.left(), rows.top, frame.clip.width(), rows.height);
}

void Canvas::hatch(const Frame& frame, Rows rows, double fromMs, double toMs) {
  const double a = frame.toPx(fromMs);
  const double b = frame.toPx(toMs);
  if (std::abs(b - a) < 1.0) return;
  const int l = static_cast<int>(std::lround(std::min(a, b)));
  m_hatch.emplace_back(l, rows.top, static_cast<int>(std::lround(std::max(a, b))) - l, rows.height);
}

std::uint8_t Canvas::fadedShade(std::uint8_t shade, ItemRef item) const {
  if (m_fade.all) return static_cast<std::uint8_t>(shade + kShadeCount);
  if (m_fade.mask && !m_fade.mask->empty()) {
    const bool keep =
        item.kind == ItemRef::Kind::Op && m_fade.mask->contains(item.index) && (*m_fade.mask)[item.index] != 0;
    if (!keep) return static_cast<std::uint8_t>(shade + kShadeCount);
  }
  return shade;
}

void Canvas::emitRect(Run& run, Rows rows, std::uint8_t shade, int left, int right) {
  if (right <= left) right = left + 1;
  auto& bucket = m_buckets[shade];
  if (shade == run.shade && run.right == left && !bucket.empty() && run.index < bucket.size()) {
    bucket[run.index].setRight(right - 1);  // run-length: extend the previous column
  } else {
    bucket.emplace_back(left, rows.top, right - left, rows.height);
    run.index = bucket.size() - 1;
    ++m_stats.rects;
  }
  run.shade = shade;
  run.right = right;
}

void Canvas::intervals(const Lane& lane, const Frame& frame, Rows rows) {
  const bool labelsFit = rows.height >= m_textHeight;
  const bool leftToRight = frame.scale >= 0;
  // The visible window: binary search stepping back by the longest duration; blocks that end
  // before the window are skipped whole.
  std::size_t k = lane.firstVisible(frame.visLo);
  Run run{0, INT_MIN, 0};
  int pendingColumn = INT_MIN;
  std::uint8_t pendingShade = 0;
  double pendingDurationMs = -1;
  auto flushPending = [&]() {
    if (pendingColumn != INT_MIN) emitRect(run, rows, pendingShade, pendingColumn, pendingColumn + 1);
    pendingColumn = INT_MIN;
    pendingDurationMs = -1;
  };
  const std::size_t n = lane.size();
  while (k < n) {
    const std::size_t block = k / TimelineData::kBlockSize;
    if (k % TimelineData::kBlockSize == 0 && lane.blocks[block].maxEndMs < frame.visLo) {
      k += TimelineData::kBlockSize;
      continue;
    }
    const double s = lane.startMs[k];
    if (s > frame.visHi) break;
    const double e = lane.endMs[k];
    if (e < frame.visLo) {
      ++k;
      continue;
    }
    ++m_stats.visibleItems;
    double pa = frame.toPx(s);
    double pb = frame.toPx(e);
    if (!leftToRight) std::swap(pa, pb);
    const std::uint8_t shade = fadedShade(lane.shade[k], lane.items[k]);
    if (pb - pa < 1.0) {
      // Sub-pixel: one column per pixel, coloured by the longest interval that falls in it.
      const int column = static_cast<int>(std::floor(pa));
      if (column != pendingColumn) {
        flushPending();
        pendingColumn = column;
      }
      if (e - s > pendingDurationMs) {
        pendingDurationMs = e - s;
        pendingShade = shade;
      }
    } else {
      flushPending();
      const int left = static_cast<int>(std::lround(pa));
      int right = static_cast<int>(std::lround(pb));
      if (right - left >= 4) --right;  // a one-pixel gap keeps neighbouring ops apart
      emitRect(run, rows, shade, left, right);
      run.right = INT_MIN;  // never run-length-merge whole ops
      if (labelsFit && lane.microbatch[k] >= 0 && right - left >= m_labelMinWidth) {
        m_labels.push_back({QRect(left, rows.top, right - left, rows.height), lane.microbatch[k], shade});
      }
    }
    ++k;
  }
  flushPending();
}

const QStaticText& Canvas::labelText(std::int32_t microbatch) {
  auto it = m_labelCache.find(microbatch);
  if (it == m_labelCache.end()) {
    QStaticText text(QString::number(microbatch));
    text.setTextFormat(Qt::PlainText);
    it = m_labelCache.insert(microbatch, text);
  }
  return it.value();
}

void Canvas::paint(QCPPainter* painter, const TimelinePalette& palette) {
  painter->setAntialiasing(false);
  painter->setPen(Qt::NoPen);
  painter->setBrush(palette.laneBackground);
  painter->drawRects(m_backgrounds.data(), static_cast<int>(m_backgrounds.size()));
  painter->setBrush(QBrush(palette.bubbleHatch, Qt::BDiagPattern));
  painter->drawRects(m_hatch.data(), static_cast<int>(m_hatch.size()));
  for (const QRect& r : m_hatch) m_stats.hatchedPixels += r.width();
  m_stats.drawCalls = 2;
  for (std::size_t shade = 0; shade < m_buckets.size(); ++shade) {
    const auto& bucket = m_buckets[shade];
    if (bucket.empty()) continue;
    painter->setBrush(shade < palette.shades.size() ? palette.shades[shade] : palette.faded(shade));
    painter->drawRects(bucket.data(), static_cast<int>(bucket.size()));
    ++m_stats.drawCalls;
  }
  if (m_labels.empty()) return;
  for (const Label& label : m_labels) {
    const bool faded = label.shade >= kShadeCount;
    const QColor bg = faded ? palette.faded(label.shade) : palette.shades[label.shade];
    painter->setPen(palette.textOn(bg));
    const QStaticText& text = labelText(label.microbatch);
    const QSizeF size = text.size();
    painter->drawStaticText(QPointF(label.rect.center().x() - size.width() / 2.0 + 0.5,
                                    label.rect.center().y() - size.height() / 2.0 + 0.5),
                            text);
  }
  m_stats.labels = m_labels.size();
}

// --- the painters of each kind of lane -----------------------------------------------------

void OpLanes::collect(const Lane& lane, const Frame& frame, Rows rows, Canvas& canvas) const {
  canvas.background(frame, rows);
  if (lane.hatchGapsOnly) {
    // Two pipes on one GPU: idle only where it computes on neither (the device's gaps).
    auto gap = std::lower_bound(lane.idleGaps.begin(), lane.idleGaps.end(), std::make_pair(frame.visLo, frame.visLo),
                                [](const auto& g, const auto& v) { return g.second < v.first; });
    for (; gap != lane.idleGaps.end() && gap->first <= frame.visHi; ++gap)
      canvas.hatch(frame, rows, gap->first, gap->second);
  } else if (lane.size() > 0) {
    // Idle time inside the device's span is bubble: hatch the whole span, ops cover the rest.
    canvas.hatch(frame, rows, lane.firstStartMs, lane.lastEndMs);
  }
  if (lane.size() > 0) canvas.intervals(lane, frame, rows);
}

void TransferLanes::collect(const Lane& lane, const Frame& frame, Rows rows, Canvas& canvas) const {
  if (lane.size() > 0) canvas.intervals(lane, frame, rows);
}

void KernelLanes::collect(const Lane& lane, const Frame& frame, Rows rows, Canvas& canvas) const {
  canvas.background(frame, rows);
  if (lane.size() > 0) canvas.intervals(lane, frame, rows);
}

const TrackPainter& painterFor(const Lane& lane) {
  static const OpLanes ops;
  static const TransferLanes transfers;
  static const KernelLanes kernels;
  if (lane.comm) return transfers;
  if (lane.activity) return kernels;
  return ops;
}

void IterationMarkers::draw(QCPPainter* painter, const Frame& frame, const ActivityTrace* activity,
                            const TimelinePalette& palette) {
  if (!activity || activity->iterations.empty()) return;
  painter->setPen(QPen(palette.hover, 1.0, Qt::DashLine));
  const QFontMetrics metrics(painter->font());
  for (const ActivityIteration& it : activity->iterations) {
    if (it.endMs < frame.visLo || it.startMs > frame.visHi) continue;
    const double x = frame.toPx(it.startMs);
    painter->drawLine(QLineF(x, frame.clip.top(), x, frame.clip.bottom()));
    const QString name = QString::fromStdString(it.name);
    if (frame.toPx(it.endMs) - x > metrics.horizontalAdvance(name) + 6)
      painter->drawText(QPointF(x + 3, frame.clip.top() + metrics.ascent() + 1), name);
  }
}

}  // namespace pipestudio::viz::tracks
