#include "MemoryTrack.hpp"

#include <QPalette>
#include <algorithm>
#include <cmath>
#include <limits>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/viz/TimelinePlottable.hpp"

namespace pipestudio::viz {

QCPItemText* hiddenRectText(QCustomPlot* plot, QCPAxisRect* rect, QPointF at, Qt::Alignment alignment,
                            const QMargins& padding) {
  auto* text = new QCPItemText(plot);
  text->setClipAxisRect(rect);
  text->setLayer(QStringLiteral("highlights"));
  text->position->setAxisRect(rect);
  text->position->setType(QCPItemPosition::ptAxisRectRatio);
  text->position->setCoords(at.x(), at.y());
  text->setPositionAlignment(alignment);
  text->setPadding(padding);
  text->setVisible(false);
  return text;
}

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
/// Memory curves get a clickable legend up to this many devices (beyond, hover reads them).
constexpr int kMaxMemoryLegendDevices = 16;

QColor memoryColour(std::size_t device) {
  return QColor::fromHsvF(static_cast<float>(std::fmod(0.58 + 0.62 * static_cast<double>(device), 1.0)), 0.65f, 0.85f);
}

QString q(const std::string& s) { return QString::fromStdString(s); }

}  // namespace

MemoryTrack::MemoryTrack(QCustomPlot* plot, QCPAxisRect* rect, std::function<void()> replot)
    : m_plot(plot), m_rect(rect), m_replot(std::move(replot)) {
  QCPAxis* keys = rect->axis(QCPAxis::atBottom);
  QCPAxis* values = rect->axis(QCPAxis::atLeft);
  m_peaks = plot->addGraph(keys, values);
  m_peaks->setLineStyle(QCPGraph::lsNone);
  m_peaks->setName(QStringLiteral("peaks"));
  m_limitLine = new QCPItemStraightLine(plot);
  m_limitLine->setClipAxisRect(rect);
  m_limitLine->point1->setAxes(keys, values);
  m_limitLine->point2->setAxes(keys, values);
  m_limitLine->setVisible(false);
  m_limitLabel = new QCPItemText(plot);
  m_limitLabel->setClipAxisRect(rect);
  m_limitLabel->position->setAxisRect(rect);
  m_limitLabel->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
  m_limitLabel->position->setTypeY(QCPItemPosition::ptPlotCoords);
  m_limitLabel->position->setAxes(keys, values);
  m_limitLabel->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
  m_limitLabel->setVisible(false);
  m_readout = hiddenRectText(plot, rect, QPointF(0.005, 0.02), Qt::AlignLeft | Qt::AlignTop, QMargins(4, 2, 4, 2));
  // The legend: inside the memory plot, one clickable entry per device (few devices only).
  m_legend = new QCPLegend;
  rect->insetLayout()->addElement(m_legend, Qt::AlignRight | Qt::AlignTop);
  m_legend->setLayer(QStringLiteral("legend"));
  m_legend->setFillOrder(QCPLegend::foRowsFirst);
  m_legend->setRowSpacing(0);
  m_legend->setColumnSpacing(6);
  m_legend->setIconSize(12, 8);
  m_legend->setVisible(false);
}

void MemoryTrack::rebuild(const TimelineData* data) {
  for (QCPGraph* graph : m_graphs) m_plot->removeGraph(graph);
  m_graphs.clear();
  m_pens.clear();
  m_legend->clearItems();
  m_peaks->data()->clear();
  m_highlighted = -1;
  m_readout->setVisible(false);
  const Plan* p = data ? data->plan() : nullptr;
  double maxGiB = 0;
  m_memory = {};
  if (p && !p->ops.empty()) {
    m_memory = memoryTimeline(*p);
    const auto devices = m_memory.devices.size();
    QVector<double> peakKeys;
    QVector<double> peakValues;
    for (std::size_t d = 0; d < devices; ++d) {
      const auto& points = m_memory.devices[d];
      QCPGraph* graph = m_plot->addGraph(m_rect->axis(QCPAxis::atBottom), m_rect->axis(QCPAxis::atLeft));
      graph->setLineStyle(QCPGraph::lsStepLeft);
      graph->setAdaptiveSampling(true);
      const QPen pen(memoryColour(d), 1.2);
      graph->setPen(pen);
      m_pens.push_back(pen);
      graph->setName(QStringLiteral("GPU %1").arg(d));
      QVector<QCPGraphData> curve;
      curve.reserve(static_cast<qsizetype>(points.size()) + 1);
      double peakTime = 0;
      std::int64_t peak = -1;
      for (const MemoryPoint& point : points) {
        curve.push_back({point.timeMs, static_cast<double>(point.bytes) / kGiB});
        if (point.bytes > peak) {
          peak = point.bytes;
          peakTime = point.timeMs;
        }
      }
      if (!points.empty()) curve.push_back({data->endMs(), static_cast<double>(points.back().bytes) / kGiB});
      graph->data()->set(curve, true);
      if (peak >= 0) {
        peakKeys.push_back(peakTime);
        peakValues.push_back(static_cast<double>(peak) / kGiB);
        maxGiB = std::max(maxGiB, static_cast<double>(peak) / kGiB);
      }
      m_graphs.push_back(graph);
      if (static_cast<int>(devices) <= kMaxMemoryLegendDevices) graph->addToLegend(m_legend);
    }
    m_peaks->setData(peakKeys, peakValues);
    if (!m_graphs.empty()) m_legend->setWrap(static_cast<int>(std::min<std::size_t>(2, m_graphs.size())));
  }
  m_legend->setVisible(m_legend->itemCount() > 0);
  scaleToLimit(maxGiB);
}

void MemoryTrack::scaleToLimit(double maxGiB) {
  const double limitGiB = static_cast<double>(m_limitBytes) / kGiB;
  // The curves set the scale, so small curves keep their shape; the limit joins the scale when
  // the peak comes near it (within kLimitOnScale), and is named at the top of the plot, off the
  // scale, when it is far above.
  constexpr double kLimitOnScale = 1.6;
  const bool hasLimit = m_limitBytes > 0;
  const bool limitOnScale = hasLimit && (maxGiB <= 0 || limitGiB <= kLimitOnScale * maxGiB);
  const double curvesTop = std::max(maxGiB, 1e-3) * 1.12;
  const double top = limitOnScale ? std::max(curvesTop, limitGiB * 1.08) : curvesTop;
  m_limitLine->setVisible(limitOnScale);
  m_limitLine->point1->setCoords(0, limitGiB);
  m_limitLine->point2->setCoords(1, limitGiB);
  m_limitLabel->setVisible(hasLimit);
  const QString limit = q(formatBytes(static_cast<double>(m_limitBytes)));
  if (limitOnScale) {
    m_limitLabel->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
    m_limitLabel->position->setCoords(0.005, limitGiB);
    m_limitLabel->setText(QStringLiteral("limit %1").arg(limit));
  } else {
    m_limitLabel->setPositionAlignment(Qt::AlignHCenter | Qt::AlignTop);
    m_limitLabel->position->setCoords(0.5, top);
    m_limitLabel->setText(QStringLiteral("limit %1 ↑ (above the scale)").arg(limit));
  }
  QCPAxis* memoryAxis = m_rect->axis(QCPAxis::atLeft);
  memoryAxis->setLabel(QStringLiteral("memory (GiB)"));
  memoryAxis->setRange(0, top);
}

QString MemoryTrack::limitLabel() const { return m_limitLabel->visible() ? m_limitLabel->text() : QString(); }

void MemoryTrack::setCurveVisible(int device, bool visible, QColor text) {
  if (!inRange(m_graphs, device)) return;
  QCPGraph* graph = m_graphs[static_cast<std::size_t>(device)];
  graph->setVisible(visible);
  if (auto* item = m_legend->itemWithPlottable(graph)) {
    if (!visible) text.setAlpha(90);
    item->setTextColor(text);
  }
  m_replot();
}

int MemoryTrack::deviceOfLegendItem(QCPAbstractLegendItem* item) const {
  auto* entry = qobject_cast<QCPPlottableLegendItem*>(item);
  if (!entry) return -1;
  for (std::size_t d = 0; d < m_graphs.size(); ++d) {
    if (m_graphs[d] == entry->plottable()) return static_cast<int>(d);
  }
  return -1;
}

void MemoryTrack::highlight(int device) {
  if (device == m_highlighted) return;
  m_highlighted = device;
  for (std::size_t d = 0; d < m_graphs.size(); ++d) {
    QPen pen = m_pens[d];
    if (device >= 0 && static_cast<int>(d) == device) {
      pen.setWidthF(2.6);
    } else if (device >= 0) {
      QColor c = pen.color();
      c.setAlpha(70);
      pen.setColor(c);
    }
    m_graphs[d]->setPen(pen);
  }
  if (inRange(m_graphs, device)) m_graphs[static_cast<std::size_t>(device)]->setLayer(QStringLiteral("main"));
  m_replot();
}

QString MemoryTrack::readout(QPointF pixel) {
  if (m_memory.devices.empty() || !m_rect->visible() || !m_rect->rect().contains(pixel.toPoint())) {
    if (m_readout->visible()) {
      m_readout->setVisible(false);
      highlight(-1);
    }
    return {};
  }
  const double t = m_rect->axis(QCPAxis::atBottom)->pixelToCoord(pixel.x());
  const double y = m_rect->axis(QCPAxis::atLeft)->pixelToCoord(pixel.y());
  int best = -1;
  double bestDistance = std::numeric_limits<double>::infinity();
  std::int64_t bestBytes = 0;
  for (std::size_t d = 0; d < m_memory.devices.size(); ++d) {
    if (d < m_graphs.size() && !m_graphs[d]->visible()) continue;
    const auto& points = m_memory.devices[d];
    if (points.empty()) continue;
    // The step function's value at t: the last point at or before t.
    auto it = std::upper_bound(points.begin(), points.end(), t,
                               [](double time, const MemoryPoint& p) { return time < p.timeMs; });
    const std::int64_t bytes = it == points.begin() ? points.front().bytes : std::prev(it)->bytes;
    const double distance = std::abs(static_cast<double>(bytes) / kGiB - y);
    if (distance < bestDistance) {
      bestDistance = distance;
      best = static_cast<int>(d);
      bestBytes = bytes;
    }
  }
  if (best < 0) return {};
  QString text = QStringLiteral("GPU %1: %2 GiB at %3")
                     .arg(best)
                     .arg(static_cast<double>(bestBytes) / kGiB, 0, 'f', 2)
                     .arg(q(formatMs(t)));
  const auto staticBytes =
      inRange(m_memory.staticBytes, best) ? m_memory.staticBytes[static_cast<std::size_t>(best)] : 0;
  if (staticBytes > 0) {
    text += QStringLiteral(" (static %1 + activations %2)")
                .arg(q(formatBytes(static_cast<double>(staticBytes))),
                     q(formatBytes(static_cast<double>(std::max<std::int64_t>(0, bestBytes - staticBytes)))));
  }
  m_readout->setText(text);
  m_readout->setVisible(true);
  highlight(best);
  return text;
}

void MemoryTrack::applyPalette(const QPalette& pal, const TimelinePalette& tp) {
  m_limitLine->setPen(QPen(tp.critical, 1.5, Qt::DashLine));
  m_limitLabel->setColor(tp.critical);
  m_peaks->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDiamond, tp.critical, tp.critical, 7));
  QColor readoutBg = pal.color(QPalette::ToolTipBase);
  readoutBg.setAlpha(230);
  m_readout->setBrush(readoutBg);
  m_readout->setColor(pal.color(QPalette::ToolTipText));
  m_readout->setPen(QPen(pal.color(QPalette::Mid)));
  QColor legendBg = pal.color(QPalette::Base);
  legendBg.setAlpha(200);
  m_legend->setBrush(legendBg);
  m_legend->setBorderPen(QPen(pal.color(QPalette::Mid)));
  m_legend->setTextColor(pal.color(QPalette::WindowText));
}

}  // namespace pipestudio::viz
