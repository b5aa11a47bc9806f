#include "pipestudio/viz/TimelinePlottable.hpp"

#include <QPalette>
#include <algorithm>
#include <cmath>
#include <limits>

#include "TimelinePainters.hpp"

namespace pipestudio::viz {

namespace {

// Hues per colour slot (F, B, W, BW, N, S, T, OPT, comm forward, comm backward, then GPU
// activity: kernel, memcpy, memset, NCCL), two shades each (even / odd microbatch). Chosen to
// stay apart for the common colour-vision deficiencies (Tableau 10 family).
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
    {0x4e79c7, 0x6a8fd2},  // kernel
    {0xe19a2f, 0xe8ab52},  // memcpy
    {0x9c755f, 0xb08d79},  // memset
    {0xd94f51, 0xe07173},  // NCCL
}};

/// The third and fourth shade of a slot (chunks 2 and 3 of interleaved plans): the first shade
/// darkened and the second lightened, so four chunks read as four steps of one hue.
QColor thirdShade(const QColor& first) { return first.darker(135); }
QColor fourthShade(const QColor& second) { return second.lighter(125); }

int luminance(const QColor& c) { return (c.red() * 299 + c.green() * 587 + c.blue() * 114) / 1000; }

}  // namespace

TimelinePalette TimelinePalette::light() {
  TimelinePalette p;
  for (std::size_t i = 0; i < kLightShades.size(); ++i) {
    const std::size_t base = i * kShadesPerSlot;
    p.shades[base] = QColor::fromRgb(kLightShades[i][0]);
    p.shades[base + 1] = QColor::fromRgb(kLightShades[i][1]);
    p.shades[base + 2] = thirdShade(p.shades[base]);
    p.shades[base + 3] = fourthShade(p.shades[base + 1]);
  }
  p.laneBackground = QColor(0xf3, 0xf4, 0xf6);
  p.bubbleHatch = QColor(0xb0, 0xb4, 0xba);
  p.textOnDark = Qt::white;
  p.textOnLight = QColor(0x20, 0x20, 0x20);
  p.hover = QColor(0x10, 0x10, 0x10);
  p.chain = QColor(0xff, 0x8c, 0x00);
  p.critical = QColor(0xd0, 0x10, 0x30);
  p.measure = QColor(0x1e, 0x88, 0xe5, 50);
  return p;
}

QColor TimelinePalette::faded(std::size_t shade) const {
  const QColor& c = shades[shade % shades.size()];
  // 25 % of the colour over the lane background: still tells kinds apart, clearly receded.
  const double a = 0.25;
  return QColor::fromRgbF(static_cast<float>(a * c.redF() + (1 - a) * laneBackground.redF()),
                          static_cast<float>(a * c.greenF() + (1 - a) * laneBackground.greenF()),
                          static_cast<float>(a * c.blueF() + (1 - a) * laneBackground.blueF()));
}

TimelinePalette TimelinePalette::dark() {
  TimelinePalette p = light();
  for (auto& c : p.shades) c = c.lighter(112);
  p.laneBackground = QColor(0x2a, 0x2c, 0x30);
  p.bubbleHatch = QColor(0x5a, 0x5e, 0x66);
  p.hover = QColor(0xf0, 0xf0, 0xf0);
  p.chain = QColor(0xff, 0xb0, 0x40);
  p.critical = QColor(0xff, 0x50, 0x60);
  p.measure = QColor(0x64, 0xb5, 0xf6, 60);
  return p;
}

QColor TimelinePalette::textOn(const QColor& background) const {
  return luminance(background) < 150 ? textOnDark : textOnLight;
}

TimelinePalette TimelinePalette::forPalette(const QPalette& palette) {
  return luminance(palette.color(QPalette::Window)) < 128 ? dark() : light();
}

TimelinePlottable::TimelinePlottable(QCPAxis* keyAxis, QCPAxis* valueAxis)
    : QCPAbstractPlottable(keyAxis, valueAxis),
      m_palette(TimelinePalette::light()),
      m_canvas(std::make_unique<tracks::Canvas>()) {
  setAntialiased(false);
  setAntialiasedFill(false);
  setSelectable(QCP::stNone);
}

void TimelinePlottable::setTimeline(std::shared_ptr<const TimelineData> data) {
  m_data = std::move(data);
  m_canvas->clearLabelCache();
}

void TimelinePlottable::setTimelinePalette(const TimelinePalette& palette) { m_palette = palette; }

void TimelinePlottable::setOpMask(IdVector<char> mask) { m_mask = std::move(mask); }

TimelinePlottable::~TimelinePlottable() = default;

void TimelinePlottable::draw(QCPPainter* painter) {
  m_stats = {};
  if (!m_data || m_data->empty()) return;
  QCPAxis* keyAxis = mKeyAxis.data();
  QCPAxis* valueAxis = mValueAxis.data();
  if (!keyAxis || !valueAxis) return;
  const tracks::Frame frame = tracks::Frame::of(*keyAxis, clipRect());
  m_canvas->begin(painter->font(), m_data->plan() ? static_cast<int>(m_data->plan()->config.microbatches) : 0,
                  {m_dimmed, &m_mask});
  // Each lane draws as its track's kind does (TimelinePainters.hpp); lanes off screen not at all.
  for (const Lane& lane : m_data->lanes()) {
    const double yA = valueAxis->coordToPixel(lane.valueLo);
    const double yB = valueAxis->coordToPixel(lane.valueHi);
    const tracks::Rows rows{static_cast<int>(std::lround(std::min(yA, yB))),
                            std::max(1, static_cast<int>(std::lround(std::abs(yB - yA))))};
    if (rows.top > frame.clip.bottom() || rows.top + rows.height < frame.clip.top()) continue;
    tracks::painterFor(lane).collect(lane, frame, rows, *m_canvas);
  }
  m_canvas->paint(painter, m_palette);
  m_stats = m_canvas->stats();
  tracks::IterationMarkers::draw(painter, frame, m_data->activity(), m_palette);
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
  const Lane& l = m_data->lane(lane);
  const double xa = mKeyAxis->coordToPixel(m_data->itemStartMs(ref));
  const double xb = mKeyAxis->coordToPixel(m_data->itemEndMs(ref));
  const double ya = mValueAxis->coordToPixel(l.valueLo);
  const double yb = mValueAxis->coordToPixel(l.valueHi);
  return {QPointF(std::min(xa, xb), std::min(ya, yb)), QPointF(std::max(xa, xb), std::max(ya, yb))};
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
    : QCPAbstractPlottable(timeline->keyAxis(), timeline->valueAxis()),
      m_timeline(timeline),
      m_measureFromMs(std::numeric_limits<double>::quiet_NaN()),
      m_measureToMs(std::numeric_limits<double>::quiet_NaN()) {
  setSelectable(QCP::stNone);
  setAntialiased(false);
}

void TimelineOverlay::setHover(ItemRef ref) { m_hover = ref; }

void TimelineOverlay::setChain(std::vector<int> ops, int selectedOp) {
  m_chain = std::move(ops);
  m_selected = selectedOp;
}

void TimelineOverlay::setCriticalPath(std::vector<int> ops) { m_critical = std::move(ops); }

void TimelineOverlay::setArrows(std::vector<int> predecessors, std::vector<int> successors) {
  m_predecessors = std::move(predecessors);
  m_successors = std::move(successors);
}

void TimelineOverlay::setMatches(std::vector<int> ops) { m_matches = std::move(ops); }

void TimelineOverlay::setMeasuredRange(double fromMs, double toMs) {
  m_measureFromMs = std::min(fromMs, toMs);
  m_measureToMs = std::max(fromMs, toMs);
}

QCPRange TimelineOverlay::getKeyRange(bool& foundRange, QCP::SignDomain) const {
  foundRange = false;
  return {};
}

QCPRange TimelineOverlay::getValueRange(bool& foundRange, QCP::SignDomain, const QCPRange&) const {
  foundRange = false;
  return {};
}

namespace {

void drawArrow(QCPPainter* painter, QPointF from, QPointF to) {
  painter->drawLine(QLineF(from, to));
  const QLineF line(to, from);
  if (line.length() < 4) return;
  const double angle = std::atan2(-line.dy(), line.dx());
  constexpr double kHead = 7.0;
  const QPointF a = to + QPointF(std::cos(angle + 0.45) * kHead, -std::sin(angle + 0.45) * kHead);
  const QPointF b = to + QPointF(std::cos(angle - 0.45) * kHead, -std::sin(angle - 0.45) * kHead);
  const std::array<QPointF, 3> head{to, a, b};
  painter->drawPolygon(head.data(), static_cast<int>(head.size()));
}

}  // namespace

void TimelineOverlay::draw(QCPPainter* painter) {
  const TimelineData* data = m_timeline->timeline();
  if (!data || data->empty()) return;
  const TimelinePalette& palette = m_timeline->timelinePalette();
  const QRectF clip = clipRect();
  painter->setAntialiasing(false);
  painter->setBrush(Qt::NoBrush);

  if (std::isfinite(m_measureFromMs) && std::isfinite(m_measureToMs) && mKeyAxis) {
    const double a = mKeyAxis->coordToPixel(m_measureFromMs);
    const double b = mKeyAxis->coordToPixel(m_measureToMs);
    QRectF band(QPointF(std::min(a, b), clip.top()), QPointF(std::max(a, b), clip.bottom()));
    band = band.intersected(clip);
    painter->setPen(QPen(palette.measure.darker(180), 1.0, Qt::DashLine));
    painter->setBrush(palette.measure);
    painter->drawRect(band);
    painter->setBrush(Qt::NoBrush);
  }

  auto outline = [&](const std::vector<int>& ops, const QColor& colour, qreal width, double minWidthPx) {
    if (ops.empty()) return;
    std::vector<QRectF> rects;
    rects.reserve(ops.size());
    for (int op : ops) {
      QRectF r = m_timeline->itemRect({ItemRef::Kind::Op, op});
      if (!r.intersects(clip) || r.width() < minWidthPx) continue;
      if (r.width() < 2) r.setWidth(2);
      rects.push_back(r.adjusted(0.5, 0.5, -0.5, -0.5));
    }
    QPen pen(colour, width);
    pen.setJoinStyle(Qt::MiterJoin);
    painter->setPen(pen);
    painter->drawRects(rects.data(), static_cast<int>(rects.size()));
  };

  if (!m_critical.empty()) {
    // At full view a critical op is a few pixels wide: an outline would paint over it (and a
    // thick one over its neighbours). Narrow ops get a thin line along the lane's bottom edge,
    // wide ones a 1.5 px outline.
    double widthSum = 0;
    for (int op : m_critical) widthSum += m_timeline->itemRect({ItemRef::Kind::Op, op}).width();
    const double meanWidth = widthSum / static_cast<double>(m_critical.size());
    m_lastCriticalPen = meanWidth >= 12.0 ? 1.5 : 1.0;
    outline(m_critical, palette.critical, m_lastCriticalPen, 6.0);
    std::vector<QLineF> underlines;
    for (int op : m_critical) {
      const QRectF r = m_timeline->itemRect({ItemRef::Kind::Op, op});
      if (r.width() >= 6.0 || !r.intersects(clip)) continue;
      underlines.emplace_back(QPointF(r.left(), r.bottom() - 0.5),
                              QPointF(std::max(r.right(), r.left() + 1), r.bottom() - 0.5));
    }
    painter->setPen(QPen(palette.critical, 1.0));
    painter->drawLines(underlines.data(), static_cast<int>(underlines.size()));
    // Connect consecutive critical ops so the path reads as one line across devices.
    painter->setPen(QPen(palette.critical, 1.0, Qt::DashLine));
    for (std::size_t i = 1; i < m_critical.size(); ++i) {
      const QRectF a = m_timeline->itemRect({ItemRef::Kind::Op, m_critical[i - 1]});
      const QRectF b = m_timeline->itemRect({ItemRef::Kind::Op, m_critical[i]});
      if (std::abs(a.center().y() - b.center().y()) < 1) continue;
      const QLineF line(QPointF(a.right(), a.center().y()), QPointF(b.left(), b.center().y()));
      if (clip.contains(line.p1()) || clip.contains(line.p2())) painter->drawLine(line);
    }
  }
  outline(m_matches, palette.hover, 1.0, 3.0);
  outline(m_chain, palette.chain, 2.0, 0.0);
  if (m_selected >= 0) {
    outline({m_selected}, palette.hover, 2.5, 0.0);
    // Dependency arrows: predecessors → selected → successors.
    const QRectF self = m_timeline->itemRect({ItemRef::Kind::Op, m_selected});
    painter->setAntialiasing(true);
    painter->setPen(QPen(palette.hover, 1.3));
    painter->setBrush(palette.hover);
    for (int p : m_predecessors) {
      const QRectF r = m_timeline->itemRect({ItemRef::Kind::Op, p});
      if (r.isNull()) continue;
      drawArrow(painter, QPointF(r.right(), r.center().y()), QPointF(self.left(), self.center().y()));
    }
    for (int s : m_successors) {
      const QRectF r = m_timeline->itemRect({ItemRef::Kind::Op, s});
      if (r.isNull()) continue;
      drawArrow(painter, QPointF(self.right(), self.center().y()), QPointF(r.left(), r.center().y()));
    }
    painter->setBrush(Qt::NoBrush);
    painter->setAntialiasing(false);
  }
  if (m_hover.valid()) {
    QRectF r = m_timeline->itemRect(m_hover);
    if (r.width() < 3) r.adjust(-1.5, 0, 1.5, 0);
    painter->setPen(QPen(palette.hover, 1.0));
    painter->drawRect(r.adjusted(0.5, 0.5, -0.5, -0.5));
  }
}

// --- legend ------------------------------------------------------------------------------

TimelineLegend::TimelineLegend(QCustomPlot* plot, TimelinePlottable* timeline)
    : QCPLayoutElement(plot), m_timeline(timeline) {
  setMargins(QMargins(6, 2, 6, 2));
  updateEntries();
}

void TimelineLegend::updateEntries() {
  m_entries.clear();
  const TimelinePalette& p = m_timeline->timelinePalette();
  const TimelineData* data = m_timeline->timeline();
  std::array<bool, kOpKindCount> present{};
  bool comms = false;
  if (data && data->plan()) {
    for (const Op& op : data->plan()->ops) present[static_cast<std::size_t>(op.kind)] = true;
    comms = !data->plan()->comms.empty();
  } else {
    present[static_cast<std::size_t>(OpKind::F)] = present[static_cast<std::size_t>(OpKind::B)] = true;
  }
  const bool nextIteration = data && data->frozenWorkIsNextIteration();
  const std::array<std::pair<OpKind, QString>, 8> kinds{
      {{OpKind::F, QStringLiteral("F forward")},
       {OpKind::B, QStringLiteral("B input gradient")},
       {OpKind::W, QStringLiteral("W weight gradient")},
       {OpKind::BW, QStringLiteral("BW backward")},
       {OpKind::N, nextIteration ? QStringLiteral("N frozen (next iteration)") : QStringLiteral("N frozen")},
       {OpKind::S, QStringLiteral("S vocabulary")},
       {OpKind::T, QStringLiteral("T vocabulary")},
       {OpKind::OPT, QStringLiteral("OPT optimizer")}}};
  const bool chunks = data && data->shadesChunks();
  for (const auto& [kind, text] : kinds) {
    if (!present[static_cast<std::size_t>(kind)]) continue;
    const auto slot = static_cast<ColourSlot>(static_cast<int>(kind));
    if (chunks && (kind == OpKind::F || kind == OpKind::B || kind == OpKind::W || kind == OpKind::BW)) {
      // A shade per chunk as the lanes draw them: "F chunk 0", "F chunk 1", …; beyond
      // kShadesPerSlot chunks the shades repeat, and the entry names every chunk it stands for
      // ("F chunk 0, 4").
      const int chunkCount = data->chunksPerDevice();
      const int shown = std::min(chunkCount, kShadesPerSlot);
      for (int c = 0; c < shown; ++c) {
        const QColor colour = p.shade(slot, c);
        QStringList chunksOfShade;
        for (int k = c; k < chunkCount; k += kShadesPerSlot) chunksOfShade << QString::number(k);
        m_entries.push_back({text.section(QLatin1Char(' '), 0, 0) + QStringLiteral(" chunk ") +
                                 chunksOfShade.join(QStringLiteral(", ")),
                             Swatch::Fill, colour, colour});
      }
      continue;
    }
    m_entries.push_back({text, Swatch::Fill, p.colour(slot, 0), p.colour(slot, 1)});
  }
  if (const ActivityTrace* activity = data ? data->activity() : nullptr) {
    std::array<bool, 4> kindsPresent{};
    for (const ActivityStream& s : activity->streams) {
      for (const ActivityEvent& e : s.events) kindsPresent[static_cast<std::size_t>(e.kind)] = true;
    }
    for (int k = 0; k < 4; ++k) {
      if (!kindsPresent[static_cast<std::size_t>(k)]) continue;
      const auto kind = static_cast<ActivityKind>(k);
      const auto slot = static_cast<ColourSlot>(static_cast<int>(ColourSlot::Kernel) + k);
      m_entries.push_back(
          {QString::fromUtf8(activityKindName(kind).data(), static_cast<int>(activityKindName(kind).size())),
           Swatch::Fill, p.colour(slot, 0), p.colour(slot, 1)});
    }
    if (!activity->iterations.empty())
      m_entries.push_back({QStringLiteral("iteration (ProfilerStep)"), Swatch::Dashed, p.hover, {}});
  }
  // Activation offloading's host copies: the third and fourth shade of activation transfers.
  if (present[static_cast<std::size_t>(OpKind::D2H)]) {
    const QColor c = p.shade(ColourSlot::CommForward, 2);
    m_entries.push_back({QStringLiteral("offload (D2H)"), Swatch::Fill, c, c});
  }
  if (present[static_cast<std::size_t>(OpKind::H2D)]) {
    const QColor c = p.shade(ColourSlot::CommForward, 3);
    m_entries.push_back({QStringLiteral("reload (H2D)"), Swatch::Fill, c, c});
  }
  if (comms) {
    m_entries.push_back({QStringLiteral("activation transfer"), Swatch::Fill, p.colour(ColourSlot::CommForward, 0),
                         p.colour(ColourSlot::CommForward, 1)});
    m_entries.push_back({QStringLiteral("gradient transfer"), Swatch::Fill, p.colour(ColourSlot::CommBackward, 0),
                         p.colour(ColourSlot::CommBackward, 1)});
  }
  m_entries.push_back({QStringLiteral("bubble (idle)"), Swatch::Hatch, p.bubbleHatch, p.laneBackground});
  if (m_overlayEntries) {
    m_entries.push_back({QStringLiteral("critical path"), Swatch::Outline, p.critical, {}});
    m_entries.push_back({QStringLiteral("selected microbatch"), Swatch::Outline, p.chain, {}});
  }
}

QStringList TimelineLegend::entryNames() const {
  QStringList names;
  for (const Entry& e : m_entries) names << e.text;
  return names;
}

int TimelineLegend::rowsFor(int width) const {
  if (width <= 0 || !mParentPlot) return 1;
  const QFontMetrics fm(mParentPlot->font());
  const int swatch = fm.height();
  int rows = 1;
  int x = 0;
  for (const Entry& e : m_entries) {
    const int w = swatch + 4 + fm.horizontalAdvance(e.text) + 14;
    if (x > 0 && x + w > width) {
      ++rows;
      x = 0;
    }
    x += w;
  }
  return rows;
}

QSize TimelineLegend::minimumOuterSizeHint() const {
  const QFontMetrics fm(mParentPlot ? mParentPlot->font() : QFont());
  const int rows = std::max(1, m_rows);
  return {0, rows * (fm.height() + 4) + mMargins.top() + mMargins.bottom()};
}

void TimelineLegend::draw(QCPPainter* painter) {
  const int rows = rowsFor(mRect.width());
  if (rows != m_rows) {
    // Takes effect on the next layout pass (the element's height comes from its size hint).
    m_rows = rows;
    if (mParentPlot) mParentPlot->replot(QCustomPlot::rpQueuedReplot);
  }
  const QFontMetrics fm(painter->font());
  const int swatch = fm.height() - 2;
  const int rowHeight = fm.height() + 4;
  int x = mRect.left();
  int y = mRect.top();
  const QColor text = mParentPlot ? mParentPlot->palette().color(QPalette::WindowText) : QColor(Qt::black);
  painter->setAntialiasing(false);
  for (const Entry& e : m_entries) {
    const int w = swatch + 4 + fm.horizontalAdvance(e.text) + 14;
    if (x > mRect.left() && x + w > mRect.right()) {
      x = mRect.left();
      y += rowHeight;
    }
    const QRect box(x, y + (rowHeight - swatch) / 2, swatch, swatch);
    switch (e.swatch) {
      case Swatch::Fill:
        painter->setPen(Qt::NoPen);
        painter->setBrush(e.colour);
        painter->drawRect(QRect(box.left(), box.top(), box.width() / 2, box.height()));
        painter->setBrush(e.second);
        painter->drawRect(QRect(box.left() + box.width() / 2, box.top(), box.width() - box.width() / 2, box.height()));
        break;
      case Swatch::Hatch:
        painter->setPen(Qt::NoPen);
        painter->setBrush(e.second);
        painter->drawRect(box);
        painter->setBrush(QBrush(e.colour, Qt::BDiagPattern));
        painter->drawRect(box);
        break;
      case Swatch::Outline:
      case Swatch::Dashed:
        painter->setBrush(Qt::NoBrush);
        painter->setPen(QPen(e.colour, 2.0, e.swatch == Swatch::Dashed ? Qt::DashLine : Qt::SolidLine));
        painter->drawRect(box.adjusted(1, 1, -1, -1));
        break;
    }
    painter->setPen(text);
    painter->drawText(QRect(box.right() + 4, y, w, rowHeight), Qt::AlignLeft | Qt::AlignVCenter, e.text);
    x += w;
  }
}

}  // namespace pipestudio::viz
