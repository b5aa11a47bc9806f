#include "pipestudio/viz/TimelinePlottable.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

#include <QPalette>

namespace pipestudio::viz {

namespace {

// Hues per colour slot (F, B, W, BW, N, S, T, OPT, comm forward, comm backward), two shades
// each. Chosen to stay apart for the common colour-vision deficiencies (Tableau 10 family).
constexpr std::array<std::array<unsigned, 2>, kColourSlotCount> kLightShades{{
    {0x4e79c7, 0x7096d6},  // F
    {0x4f9a45, 0x72b567},  // B
    {0x8f5fd0, 0xab86e2},  // W
    {0x22958a, 0x47b2a6},  // BW
    {0xe19a2f, 0xedb65e},  // N (frozen fill)
    {0xd94f51, 0xe67a7c},  // S
    {0xc95c88, 0xdb83a6},  // T
    {0x4d4d4d, 0x6a6a6a},  // OPT
    {0x7f9dc2, 0x9bb3d1},  // transfer: activations
    {0x8fb886, 0xa9c9a2},  // transfer: gradients
}};

int luminance(const QColor& c) { return (c.red() * 299 + c.green() * 587 + c.blue() * 114) / 1000; }

}  // namespace

TimelinePalette TimelinePalette::light() {
  TimelinePalette p;
  for (std::size_t i = 0; i < kLightShades.size(); ++i) {
    p.shades[i * 2] = QColor::fromRgb(kLightShades[i][0]);
    p.shades[i * 2 + 1] = QColor::fromRgb(kLightShades[i][1]);
  }
  p.laneBackground = QColor(0xf3, 0xf4, 0xf6);
  p.bubbleHatch = QColor(0xb0, 0xb4, 0xba);
  p.textOnDark = Qt::white;
  p.textOnLight = QColor(0x20, 0x20, 0x20);
  p.hover = QColor(0x10, 0x10, 0x10);
  p.chain = QColor(0xff, 0x8c, 0x00);
  p.critical = QColor(0xd0, 0x10, 0x30);
  return p;
}

TimelinePalette TimelinePalette::dark() {
  TimelinePalette p = light();
  for (auto& c : p.shades) c = c.lighter(112);
  p.laneBackground = QColor(0x2a, 0x2c, 0x30);
  p.bubbleHatch = QColor(0x5a, 0x5e, 0x66);
  p.hover = QColor(0xf0, 0xf0, 0xf0);
  p.chain = QColor(0xff, 0xb0, 0x40);
  p.critical = QColor(0xff, 0x50, 0x60);
  return p;
}

TimelinePalette TimelinePalette::forPalette(const QPalette& palette) {
  return luminance(palette.color(QPalette::Window)) < 128 ? dark() : light();
}

TimelinePlottable::TimelinePlottable(QCPAxis* keyAxis, QCPAxis* valueAxis)
    : QCPAbstractPlottable(keyAxis, valueAxis), m_palette(TimelinePalette::light()) {
  setAntialiased(false);
  setAntialiasedFill(false);
  setSelectable(QCP::stNone);
}

void TimelinePlottable::setTimeline(std::shared_ptr<const TimelineData> data) {
  m_data = std::move(data);
  m_labelCache.clear();
}

void TimelinePlottable::setTimelinePalette(const TimelinePalette& palette) { m_palette = palette; }

const QStaticText& TimelinePlottable::labelText(std::int32_t microbatch) {
  auto it = m_labelCache.find(microbatch);
  if (it == m_labelCache.end()) {
    QStaticText text(QString::number(microbatch));
    text.setTextFormat(Qt::PlainText);
    it = m_labelCache.insert(microbatch, text);
  }
  return it.value();
}

void TimelinePlottable::draw(QCPPainter* painter) {
  m_stats = {};
  if (!m_data || m_data->empty()) return;
  QCPAxis* keyAxis = mKeyAxis.data();
  QCPAxis* valueAxis = mValueAxis.data();
  if (!keyAxis || !valueAxis) return;

  const QRect clip = clipRect();
  const QCPRange range = keyAxis->range();
  // Linear key axis: pixel = x0 + (t - lower) * scale, computed once instead of per item.
  const double x0 = keyAxis->coordToPixel(range.lower);
  const double x1 = keyAxis->coordToPixel(range.upper);
  const double scale = (x1 - x0) / std::max(1e-300, range.size());
  const double pxLeft = clip.left() - 2.0;
  const double pxRight = clip.right() + 2.0;
  auto toPx = [&](double t) { return std::clamp(x0 + (t - range.lower) * scale, pxLeft, pxRight); };
  const double visLo = std::min(range.lower, range.upper);
  const double visHi = std::max(range.lower, range.upper);

  for (auto& bucket : m_buckets) bucket.clear();
  m_hatch.clear();
  m_labels.clear();

  const QFontMetrics metrics(painter->font());
  const int textHeight = metrics.height();
  const int digitWidth = metrics.horizontalAdvance(QLatin1Char('0'));
  const int maxDigits = static_cast<int>(std::to_string(std::max(0, m_data->plan() ? static_cast<int>(m_data->plan()->config.microbatches) : 0)).size());
  const bool scaleLeftToRight = scale >= 0;

  std::vector<QRect> backgrounds;
  backgrounds.reserve(m_data->lanes().size());

  for (const Lane& lane : m_data->lanes()) {
    const double yA = valueAxis->coordToPixel(lane.valueLo);
    const double yB = valueAxis->coordToPixel(lane.valueHi);
    const int top = static_cast<int>(std::lround(std::min(yA, yB)));
    const int height = std::max(1, static_cast<int>(std::lround(std::abs(yB - yA))));
    if (top > clip.bottom() || top + height < clip.top()) continue;
    if (!lane.comm) {
      backgrounds.emplace_back(clip.left(), top, clip.width(), height);
      if (lane.size() > 0) {
        // Idle time inside the device's span is bubble: hatch the whole span, ops cover the rest.
        const double a = toPx(lane.firstStartMs);
        const double b = toPx(lane.lastEndMs);
        if (std::abs(b - a) >= 1.0) {
          const int l = static_cast<int>(std::lround(std::min(a, b)));
          m_hatch.emplace_back(l, top, static_cast<int>(std::lround(std::max(a, b))) - l, height);
        }
      }
    }
    if (lane.size() == 0) continue;
    const bool labelsFit = height >= textHeight;

    // The visible window: binary search stepping back by the longest duration; blocks that end
    // before the window are skipped whole.
    std::size_t k = lane.firstVisible(visLo);
    int pendingColumn = INT_MIN;
    std::uint8_t pendingShade = 0;
    double pendingDurationMs = -1;
    std::uint8_t lastShade = 0;
    int lastRight = INT_MIN;
    std::size_t lastIndex = 0;
    auto emitRect = [&](std::uint8_t shade, int left, int right) {
      if (right <= left) right = left + 1;
      auto& bucket = m_buckets[shade];
      if (shade == lastShade && lastRight == left && !bucket.empty() && lastIndex < bucket.size()) {
        bucket[lastIndex].setRight(right - 1);  // run-length: extend the previous column
      } else {
        bucket.emplace_back(left, top, right - left, height);
        lastIndex = bucket.size() - 1;
        ++m_stats.rects;
      }
      lastShade = shade;
      lastRight = right;
    };
    auto flushPending = [&]() {
      if (pendingColumn != INT_MIN) emitRect(pendingShade, pendingColumn, pendingColumn + 1);
      pendingColumn = INT_MIN;
      pendingDurationMs = -1;
    };
    const std::size_t n = lane.size();
    while (k < n) {
      const std::size_t block = k / TimelineData::kBlockSize;
      if (k % TimelineData::kBlockSize == 0 && lane.blocks[block].maxEndMs < visLo) {
        k += TimelineData::kBlockSize;
        continue;
      }
      const double s = lane.startMs[k];
      if (s > visHi) break;
      const double e = lane.endMs[k];
      if (e < visLo) {
        ++k;
        continue;
      }
      ++m_stats.visibleItems;
      double pa = toPx(s);
      double pb = toPx(e);
      if (!scaleLeftToRight) std::swap(pa, pb);
      const std::uint8_t shade = lane.shade[k];
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
        emitRect(shade, left, right);
        lastRight = INT_MIN;  // never run-length-merge whole ops
        if (labelsFit && right - left >= digitWidth * maxDigits + 4) {
          m_labels.push_back({QRect(left, top, right - left, height), lane.microbatch[k], shade});
        }
      }
      ++k;
    }
    flushPending();
  }

  painter->setAntialiasing(false);
  painter->setPen(Qt::NoPen);
  painter->setBrush(m_palette.laneBackground);
  painter->drawRects(backgrounds.data(), static_cast<int>(backgrounds.size()));
  painter->setBrush(QBrush(m_palette.bubbleHatch, Qt::BDiagPattern));
  painter->drawRects(m_hatch.data(), static_cast<int>(m_hatch.size()));
  m_stats.drawCalls = 2;
  for (std::size_t shade = 0; shade < m_buckets.size(); ++shade) {
    const auto& bucket = m_buckets[shade];
    if (bucket.empty()) continue;
    painter->setBrush(m_palette.shades[shade]);
    painter->drawRects(bucket.data(), static_cast<int>(bucket.size()));
    ++m_stats.drawCalls;
  }
  if (!m_labels.empty()) {
    for (const Label& label : m_labels) {
      const QColor& bg = m_palette.shades[label.shade];
      painter->setPen(luminance(bg) < 150 ? m_palette.textOnDark : m_palette.textOnLight);
      const QStaticText& text = labelText(label.microbatch);
      const QSizeF size = text.size();
      painter->drawStaticText(QPointF(label.rect.center().x() - size.width() / 2.0 + 0.5,
                                      label.rect.center().y() - size.height() / 2.0 + 0.5),
                              text);
    }
    m_stats.labels = m_labels.size();
  }
}

void TimelinePlottable::drawLegendIcon(QCPPainter* painter, const QRectF& rect) const {
  painter->setPen(Qt::NoPen);
  painter->setBrush(m_palette.colour(ColourSlot::F));
  painter->drawRect(rect);
}

ItemRef TimelinePlottable::itemAt(const QPointF& pixel, double tolerancePx) const {
  if (!m_data || !mKeyAxis || !mValueAxis) return {};
  if (!clipRect().contains(pixel.toPoint())) return {};
  const double timeMs = mKeyAxis->pixelToCoord(pixel.x());
  const double value = mValueAxis->pixelToCoord(pixel.y());
  const double msPerPx = std::abs(mKeyAxis->pixelToCoord(pixel.x() + 1.0) - timeMs);
  return m_data->hitTest(timeMs, value, tolerancePx * msPerPx);
}

QRectF TimelinePlottable::itemRect(ItemRef ref) const {
  if (!m_data || !ref.valid() || !mKeyAxis || !mValueAxis) return {};
  const int lane = m_data->laneOf(ref);
  if (lane < 0) return {};
  const Lane& l = m_data->lanes()[static_cast<std::size_t>(lane)];
  const double xa = mKeyAxis->coordToPixel(m_data->itemStartMs(ref));
  const double xb = mKeyAxis->coordToPixel(m_data->itemEndMs(ref));
  const double ya = mValueAxis->coordToPixel(l.valueLo);
  const double yb = mValueAxis->coordToPixel(l.valueHi);
  return QRectF(QPointF(std::min(xa, xb), std::min(ya, yb)), QPointF(std::max(xa, xb), std::max(ya, yb)));
}

double TimelinePlottable::selectTest(const QPointF& pos, bool onlySelectable, QVariant* details) const {
  if (onlySelectable && mSelectable == QCP::stNone) return -1;
  const double tolerance = mParentPlot ? mParentPlot->selectionTolerance() : 4.0;
  const ItemRef ref = itemAt(pos, tolerance);
  if (!ref.valid()) return -1;
  if (details) *details = QVariant::fromValue(static_cast<int>(ref.kind) * (1 << 30) + ref.index);
  const QRectF r = itemRect(ref);
  if (pos.x() >= r.left() && pos.x() <= r.right()) return 0;
  return std::min(std::abs(pos.x() - r.left()), std::abs(pos.x() - r.right()));
}

QCPRange TimelinePlottable::getKeyRange(bool& foundRange, QCP::SignDomain) const {
  foundRange = m_data && !m_data->empty() && m_data->endMs() > m_data->beginMs();
  return foundRange ? QCPRange(m_data->beginMs(), m_data->endMs()) : QCPRange();
}

QCPRange TimelinePlottable::getValueRange(bool& foundRange, QCP::SignDomain, const QCPRange&) const {
  foundRange = m_data && m_data->deviceCount() > 0;
  return foundRange ? QCPRange(0, m_data->deviceCount()) : QCPRange();
}

// --- overlay -----------------------------------------------------------------------------

TimelineOverlay::TimelineOverlay(TimelinePlottable* timeline)
    : QCPAbstractPlottable(timeline->keyAxis(), timeline->valueAxis()), m_timeline(timeline) {
  setSelectable(QCP::stNone);
  setAntialiased(false);
}

void TimelineOverlay::setHover(ItemRef ref) { m_hover = ref; }

void TimelineOverlay::setChain(std::vector<int> ops, int selectedOp) {
  m_chain = std::move(ops);
  m_selected = selectedOp;
}

void TimelineOverlay::setCriticalPath(std::vector<int> ops) { m_critical = std::move(ops); }

QCPRange TimelineOverlay::getKeyRange(bool& foundRange, QCP::SignDomain) const {
  foundRange = false;
  return {};
}

QCPRange TimelineOverlay::getValueRange(bool& foundRange, QCP::SignDomain, const QCPRange&) const {
  foundRange = false;
  return {};
}

void TimelineOverlay::draw(QCPPainter* painter) {
  const TimelineData* data = m_timeline->timeline();
  if (!data || data->empty()) return;
  const TimelinePalette& palette = m_timeline->timelinePalette();
  const QRectF clip = clipRect();
  painter->setAntialiasing(false);
  painter->setBrush(Qt::NoBrush);
  auto outline = [&](const std::vector<int>& ops, const QColor& colour, qreal width) {
    if (ops.empty()) return;
    std::vector<QRectF> rects;
    rects.reserve(ops.size());
    for (int op : ops) {
      QRectF r = m_timeline->itemRect({ItemRef::Kind::Op, op});
      if (!r.intersects(clip)) continue;
      if (r.width() < 2) r.setWidth(2);
      rects.push_back(r.adjusted(0.5, 0.5, -0.5, -0.5));
    }
    QPen pen(colour, width);
    pen.setJoinStyle(Qt::MiterJoin);
    painter->setPen(pen);
    painter->drawRects(rects.data(), static_cast<int>(rects.size()));
  };
  outline(m_critical, palette.critical, 1.5);
  if (!m_critical.empty()) {
    // Connect consecutive critical ops so the path reads as one line across devices.
    QPen pen(palette.critical, 1.0, Qt::DashLine);
    painter->setPen(pen);
    for (std::size_t i = 1; i < m_critical.size(); ++i) {
      const QRectF a = m_timeline->itemRect({ItemRef::Kind::Op, m_critical[i - 1]});
      const QRectF b = m_timeline->itemRect({ItemRef::Kind::Op, m_critical[i]});
      if (std::abs(a.center().y() - b.center().y()) < 1) continue;
      const QLineF line(QPointF(a.right(), a.center().y()), QPointF(b.left(), b.center().y()));
      if (clip.contains(line.p1()) || clip.contains(line.p2())) painter->drawLine(line);
    }
  }
  outline(m_chain, palette.chain, 2.0);
  if (m_selected >= 0) outline({m_selected}, palette.hover, 2.5);
  if (m_hover.valid()) {
    QRectF r = m_timeline->itemRect(m_hover);
    if (r.width() < 3) r.adjust(-1.5, 0, 1.5, 0);
    painter->setPen(QPen(palette.hover, 1.0));
    painter->drawRect(r.adjusted(0.5, 0.5, -0.5, -0.5));
  }
}

}  // namespace pipestudio::viz
