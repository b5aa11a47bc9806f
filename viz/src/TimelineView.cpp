#include "pipestudio/viz/TimelineView.hpp"

#include <algorithm>
#include <cmath>

#include <QApplication>
#include <QKeyEvent>
#include <QSvgGenerator>
#include <QToolTip>
#include <QVBoxLayout>

#include "pipestudio/viz/TimelinePlottable.hpp"

namespace pipestudio::viz {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

void styleAxis(QCPAxis* axis, const QPalette& palette) {
  const QColor text = palette.color(QPalette::WindowText);
  QColor grid = text;
  grid.setAlpha(40);
  axis->setBasePen(QPen(text));
  axis->setTickPen(QPen(text));
  axis->setSubTickPen(QPen(text));
  axis->setTickLabelColor(text);
  axis->setLabelColor(text);
  axis->grid()->setPen(QPen(grid, 0, Qt::DotLine));
  axis->grid()->setSubGridVisible(false);
}

}  // namespace

// --- TimelinePlot -------------------------------------------------------------------------

TimelinePlot::TimelinePlot(QWidget* parent) : QCustomPlot(parent) {
  setMouseTracking(true);
  setNoAntialiasingOnDrag(true);
  setSelectionRectMode(QCP::srmNone);
  connect(selectionRect(), &QCPSelectionRect::accepted, this,
          [this](const QRect& rect, QMouseEvent*) { Q_EMIT rubberBandZoom(rect); });
}

void TimelinePlot::mousePressEvent(QMouseEvent* event) {
  // Shift+drag draws a rubber band that zooms to its time window; a plain drag pans.
  setSelectionRectMode((event->modifiers() & Qt::ShiftModifier) ? QCP::srmCustom : QCP::srmNone);
  m_pressPos = event->pos();
  m_pressed = true;
  QCustomPlot::mousePressEvent(event);
}

void TimelinePlot::mouseMoveEvent(QMouseEvent* event) {
  QCustomPlot::mouseMoveEvent(event);
  if (event->buttons() == Qt::NoButton) Q_EMIT hoverMoved(event->position());
}

void TimelinePlot::mouseReleaseEvent(QMouseEvent* event) {
  const bool click = m_pressed && (event->pos() - m_pressPos).manhattanLength() <= 3 &&
                     event->button() == Qt::LeftButton;
  m_pressed = false;
  QCustomPlot::mouseReleaseEvent(event);
  setSelectionRectMode(QCP::srmNone);
  if (click) Q_EMIT clicked(event->position());
}

void TimelinePlot::leaveEvent(QEvent* event) {
  QCustomPlot::leaveEvent(event);
  Q_EMIT hoverMoved(QPointF(-1, -1));
}

void setupTimelineAxes(QCPAxisRect* rect, int devices) {
  QCPAxis* valueAxis = rect->axis(QCPAxis::atLeft);
  valueAxis->setRangeReversed(true);  // device 0 on top, like nsys and Perfetto
  valueAxis->setRange(0, std::max(1, devices));
  valueAxis->grid()->setVisible(false);
  valueAxis->setSubTicks(false);
  valueAxis->setTickLength(0, 0);
  auto ticker = QSharedPointer<QCPAxisTickerText>::create();
  const int step = devices <= 16 ? 1 : (devices <= 32 ? 2 : (devices <= 64 ? 4 : 8));
  for (int d = 0; d < devices; d += step) ticker->addTick(d + 0.4, QStringLiteral("GPU %1").arg(d));
  valueAxis->setTicker(ticker);
  rect->setRangeDrag(Qt::Horizontal);
  rect->setRangeZoom(Qt::Horizontal);
  rect->setRangeZoomFactor(0.85);
}

// --- TimelineView -------------------------------------------------------------------------

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  m_plot = new TimelinePlot(this);
  layout->addWidget(m_plot);
  setFocusPolicy(Qt::StrongFocus);

  m_plot->plotLayout()->clear();
  m_timelineRect = new QCPAxisRect(m_plot);
  m_memoryRect = new QCPAxisRect(m_plot);
  m_plot->plotLayout()->addElement(0, 0, m_timelineRect);
  m_plot->plotLayout()->addElement(1, 0, m_memoryRect);
  m_plot->plotLayout()->setRowStretchFactor(0, 3.0);
  m_plot->plotLayout()->setRowStretchFactor(1, 1.0);
  m_plot->plotLayout()->setRowSpacing(2);
  auto* group = new QCPMarginGroup(m_plot);
  m_timelineRect->setMarginGroup(QCP::msLeft | QCP::msRight, group);
  m_memoryRect->setMarginGroup(QCP::msLeft | QCP::msRight, group);
  m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);

  setupTimelineAxes(m_timelineRect, 1);
  m_timelineRect->axis(QCPAxis::atBottom)->setTickLabels(false);
  m_memoryRect->setRangeDrag(Qt::Horizontal);
  m_memoryRect->setRangeZoom(Qt::Horizontal);
  m_memoryRect->setRangeZoomFactor(0.85);
  m_memoryRect->axis(QCPAxis::atBottom)->setLabel(QStringLiteral("time (ms)"));
  m_memoryRect->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("memory (GiB)"));
  auto numberTicker = QSharedPointer<QCPAxisTicker>::create();
  numberTicker->setTickCount(3);
  m_memoryRect->axis(QCPAxis::atLeft)->setTicker(numberTicker);

  m_timeline = new TimelinePlottable(m_timelineRect->axis(QCPAxis::atBottom), m_timelineRect->axis(QCPAxis::atLeft));
  m_plot->addLayer(QStringLiteral("highlights"), m_plot->layer(QStringLiteral("main")), QCustomPlot::limAbove);
  m_plot->layer(QStringLiteral("highlights"))->setMode(QCPLayer::lmBuffered);
  m_overlay = new TimelineOverlay(m_timeline);
  m_overlay->setLayer(QStringLiteral("highlights"));

  m_peaks = m_plot->addGraph(m_memoryRect->axis(QCPAxis::atBottom), m_memoryRect->axis(QCPAxis::atLeft));
  m_peaks->setLineStyle(QCPGraph::lsNone);
  m_peaks->setName(QStringLiteral("peaks"));
  m_limitLine = new QCPItemStraightLine(m_plot);
  m_limitLine->setClipAxisRect(m_memoryRect);
  m_limitLine->point1->setAxes(m_memoryRect->axis(QCPAxis::atBottom), m_memoryRect->axis(QCPAxis::atLeft));
  m_limitLine->point2->setAxes(m_memoryRect->axis(QCPAxis::atBottom), m_memoryRect->axis(QCPAxis::atLeft));
  m_limitLine->setVisible(false);

  connect(m_timelineRect->axis(QCPAxis::atBottom), qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this,
          &TimelineView::onKeyRangeChanged);
  connect(m_memoryRect->axis(QCPAxis::atBottom), qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this,
          &TimelineView::onKeyRangeChanged);
  connect(m_plot, &TimelinePlot::hoverMoved, this, &TimelineView::onHover);
  connect(m_plot, &TimelinePlot::clicked, this, &TimelineView::onClick);
  connect(m_plot, &TimelinePlot::rubberBandZoom, this, [this](const QRect& rect) {
    if (rect.width() < 4) return;
    QCPAxis* axis = m_timelineRect->axis(QCPAxis::atBottom);
    setVisibleRange(axis->pixelToCoord(rect.left()), axis->pixelToCoord(rect.right()));
  });
  connect(m_plot, &QCustomPlot::mouseDoubleClick, this, [this](QMouseEvent*) { fitToView(); });
  applyPalette();
}

TimelineView::~TimelineView() = default;

std::shared_ptr<const Plan> TimelineView::plan() const { return m_data ? m_data->planPtr() : nullptr; }

const TimelineData* TimelineView::timeline() const { return m_data.get(); }

void TimelineView::setPlan(std::shared_ptr<const Plan> plan, bool keepRange) {
  const QCPRange previous = visibleRange();
  const double previousSpan = m_data ? m_data->endMs() - m_data->beginMs() : 0.0;
  m_data = plan ? std::make_shared<const TimelineData>(std::move(plan)) : nullptr;
  m_timeline->setTimeline(m_data);
  m_overlay->setHover({});
  m_overlay->setChain({}, -1);
  m_overlay->setCriticalPath(m_showCritical && m_data ? m_data->criticalPath() : std::vector<int>{});
  setupTimelineAxes(m_timelineRect, m_data ? m_data->deviceCount() : 1);
  rebuildMemory();
  const double span = m_data ? m_data->endMs() - m_data->beginMs() : 0.0;
  if (keepRange && previousSpan > 0 && span > 0 && std::abs(span - previousSpan) < 0.5 * previousSpan) {
    setVisibleRange(previous.lower, previous.upper);
  } else {
    fitToView();
  }
  requestReplot();
}

QCPRange TimelineView::visibleRange() const { return m_timelineRect->axis(QCPAxis::atBottom)->range(); }

void TimelineView::setVisibleRange(double fromMs, double toMs) {
  if (toMs < fromMs) std::swap(fromMs, toMs);
  m_timelineRect->axis(QCPAxis::atBottom)->setRange(fromMs, toMs);
  requestReplot();
}

void TimelineView::zoom(double factor, double centerMs) {
  m_timelineRect->axis(QCPAxis::atBottom)->scaleRange(factor, centerMs);
  requestReplot();
}

void TimelineView::zoom(double factor) { zoom(factor, visibleRange().center()); }

void TimelineView::pan(double deltaMs) {
  m_timelineRect->axis(QCPAxis::atBottom)->moveRange(deltaMs);
  requestReplot();
}

void TimelineView::fitToView() {
  double lo = 0;
  double hi = 1;
  if (m_data && m_data->endMs() > m_data->beginMs()) {
    lo = m_data->beginMs();
    hi = m_data->endMs();
  }
  const double pad = (hi - lo) * 0.01;
  setVisibleRange(lo - pad, hi + pad);
}

void TimelineView::onKeyRangeChanged(const QCPRange& requested) {
  if (m_syncing) return;
  m_syncing = true;
  // Keep the window inside the plan (with a margin) and no narrower than 1 µs, then mirror it
  // on the other plot so the memory curve and the ops always share one time axis.
  QCPRange range = requested;
  if (m_data && m_data->endMs() > m_data->beginMs()) {
    const double span = m_data->endMs() - m_data->beginMs();
    const double lo = m_data->beginMs() - 0.05 * span;
    const double hi = m_data->endMs() + 0.05 * span;
    if (range.size() > hi - lo) range = QCPRange(lo, hi);
    if (range.size() < 1e-3) range = QCPRange(range.center() - 5e-4, range.center() + 5e-4);
    if (range.lower < lo) range = QCPRange(lo, lo + range.size());
    if (range.upper > hi) range = QCPRange(hi - range.size(), hi);
  }
  m_timelineRect->axis(QCPAxis::atBottom)->setRange(range);
  m_memoryRect->axis(QCPAxis::atBottom)->setRange(range);
  m_syncing = false;
  Q_EMIT visibleRangeChanged(range.lower, range.upper);
}

void TimelineView::rebuildMemory() {
  for (QCPGraph* graph : m_memoryGraphs) m_plot->removeGraph(graph);
  m_memoryGraphs.clear();
  m_peaks->data()->clear();
  const Plan* p = m_data ? m_data->plan() : nullptr;
  double maxGiB = 0;
  if (p && !p->ops.empty()) {
    const MemoryTimeline memory = memoryTimeline(*p);
    const auto devices = memory.devices.size();
    QVector<double> peakKeys;
    QVector<double> peakValues;
    for (std::size_t d = 0; d < devices; ++d) {
      const auto& points = memory.devices[d];
      QCPGraph* graph = m_plot->addGraph(m_memoryRect->axis(QCPAxis::atBottom), m_memoryRect->axis(QCPAxis::atLeft));
      graph->setLineStyle(QCPGraph::lsStepLeft);
      graph->setAdaptiveSampling(true);
      const QColor colour = QColor::fromHsvF(std::fmod(0.58 + 0.62 * static_cast<double>(d), 1.0), 0.65, 0.85);
      graph->setPen(QPen(colour, 1.2));
      graph->setName(QStringLiteral("GPU %1").arg(d));
      QVector<QCPGraphData> data;
      data.reserve(static_cast<qsizetype>(points.size() + 1));
      double peakTime = 0;
      std::int64_t peak = -1;
      for (const MemoryPoint& point : points) {
        data.push_back({point.timeMs, static_cast<double>(point.bytes) / kGiB});
        if (point.bytes > peak) {
          peak = point.bytes;
          peakTime = point.timeMs;
        }
      }
      if (!points.empty()) data.push_back({m_data->endMs(), static_cast<double>(points.back().bytes) / kGiB});
      graph->data()->set(data, true);
      if (peak >= 0) {
        peakKeys.push_back(peakTime);
        peakValues.push_back(static_cast<double>(peak) / kGiB);
        maxGiB = std::max(maxGiB, static_cast<double>(peak) / kGiB);
      }
      m_memoryGraphs.push_back(graph);
    }
    m_peaks->setData(peakKeys, peakValues);
  }
  const double limitGiB = static_cast<double>(m_memoryLimitBytes) / kGiB;
  // A limit far above the peaks would flatten the curves: then it is named in the axis label
  // instead of drawn (the line shows once the peaks come within 2.5x of it).
  const bool limitOnScale = m_memoryLimitBytes > 0 && limitGiB <= 2.5 * std::max(maxGiB, 1e-3);
  m_limitLine->setVisible(limitOnScale);
  m_limitLine->point1->setCoords(0, limitGiB);
  m_limitLine->point2->setCoords(1, limitGiB);
  QCPAxis* memoryAxis = m_memoryRect->axis(QCPAxis::atLeft);
  memoryAxis->setLabel(m_memoryLimitBytes > 0 && !limitOnScale
                           ? QStringLiteral("GiB (limit %1)").arg(limitGiB, 0, 'f', 0)
                           : QStringLiteral("memory (GiB)"));
  const double top = std::max({maxGiB, limitOnScale ? limitGiB : 0.0, 1e-3}) * 1.12;
  memoryAxis->setRange(0, top);
}

void TimelineView::setMemoryLimit(std::int64_t bytes) {
  m_memoryLimitBytes = std::max<std::int64_t>(0, bytes);
  rebuildMemory();
  requestReplot();
}

void TimelineView::setMemoryVisible(bool visible) {
  m_memoryRect->setVisible(visible);
  if (visible && m_plot->plotLayout()->elementCount() < 2) m_plot->plotLayout()->addElement(1, 0, m_memoryRect);
  if (!visible) m_plot->plotLayout()->take(m_memoryRect);
  m_plot->plotLayout()->simplify();
  m_timelineRect->axis(QCPAxis::atBottom)->setTickLabels(!visible);
  m_timelineRect->axis(QCPAxis::atBottom)->setLabel(visible ? QString() : QStringLiteral("time (ms)"));
  requestReplot();
}

void TimelineView::setShowCriticalPath(bool show) {
  m_showCritical = show;
  m_overlay->setCriticalPath(show && m_data ? m_data->criticalPath() : std::vector<int>{});
  requestReplot();
}

void TimelineView::selectOp(int op) {
  if (!m_data || op < 0 || !m_data->plan() || static_cast<std::size_t>(op) >= m_data->plan()->ops.size()) {
    m_overlay->setChain({}, -1);
  } else {
    m_overlay->setChain(m_data->dependencyChain(op), op);
  }
  m_plot->layer(QStringLiteral("highlights"))->replot();
  m_plot->update();
  Q_EMIT opSelected(m_overlay->selectedOp());
}

int TimelineView::selectedOp() const { return m_overlay->selectedOp(); }

void TimelineView::onHover(QPointF pixel) {
  const ItemRef ref = pixel.x() < 0 ? ItemRef{} : m_timeline->itemAt(pixel);
  if (ref == m_overlay->hover()) return;
  m_overlay->setHover(ref);
  m_plot->layer(QStringLiteral("highlights"))->replot();
  m_plot->update();
  const QString text = m_data && ref.valid() ? QString::fromStdString(m_data->describe(ref)) : QString();
  if (text.isEmpty()) QToolTip::hideText();
  else QToolTip::showText(m_plot->mapToGlobal(pixel.toPoint()) + QPoint(12, 12), text, m_plot);
  Q_EMIT hovered(QString(text).replace(QLatin1Char('\n'), QStringLiteral(" · ")));
}

void TimelineView::onClick(QPointF pixel) {
  const ItemRef ref = m_timeline->itemAt(pixel);
  selectOp(ref.kind == ItemRef::Kind::Op ? ref.index : -1);
}

void TimelineView::requestReplot() { m_plot->replot(QCustomPlot::rpQueuedReplot); }

void TimelineView::applyPalette() {
  const QPalette pal = palette();
  m_timeline->setTimelinePalette(TimelinePalette::forPalette(pal));
  m_plot->setBackground(pal.color(QPalette::Base));
  for (QCPAxisRect* rect : {m_timelineRect, m_memoryRect}) {
    rect->setBackground(pal.color(QPalette::Base));
    for (QCPAxis* axis : rect->axes()) styleAxis(axis, pal);
  }
  m_timelineRect->axis(QCPAxis::atLeft)->grid()->setVisible(false);
  const TimelinePalette& tp = m_timeline->timelinePalette();
  m_limitLine->setPen(QPen(tp.critical, 1.5, Qt::DashLine));
  m_peaks->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDiamond, tp.critical, tp.critical, 7));
  requestReplot();
}

void TimelineView::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) applyPalette();
}

void TimelineView::keyPressEvent(QKeyEvent* event) {
  const QCPRange range = visibleRange();
  switch (event->key()) {
    case Qt::Key_F:
    case Qt::Key_0:
      fitToView();
      break;
    case Qt::Key_Plus:
    case Qt::Key_Equal:
    case Qt::Key_W:
      zoom(0.7);
      break;
    case Qt::Key_Minus:
    case Qt::Key_S:
      zoom(1.0 / 0.7);
      break;
    case Qt::Key_Left:
    case Qt::Key_A:
      pan(-0.2 * range.size());
      break;
    case Qt::Key_Right:
    case Qt::Key_D:
      pan(0.2 * range.size());
      break;
    case Qt::Key_Escape:
      selectOp(-1);
      break;
    default:
      QWidget::keyPressEvent(event);
  }
}

bool TimelineView::exportImage(const QString& path, int width, int height) {
  const int w = width > 0 ? width : std::max(800, m_plot->width());
  const int h = height > 0 ? height : std::max(500, m_plot->height());
  const QString lower = path.toLower();
  if (lower.endsWith(QStringLiteral(".pdf"))) return m_plot->savePdf(path, w, h);
  if (lower.endsWith(QStringLiteral(".jpg")) || lower.endsWith(QStringLiteral(".jpeg")))
    return m_plot->saveJpg(path, w, h);
  if (lower.endsWith(QStringLiteral(".svg"))) {
    QSvgGenerator generator;
    generator.setFileName(path);
    generator.setSize(QSize(w, h));
    generator.setViewBox(QRect(0, 0, w, h));
    generator.setTitle(QStringLiteral("PipeStudio timeline"));
    QCPPainter painter;
    if (!painter.begin(&generator)) return false;
    m_plot->toPainter(&painter, w, h);
    painter.end();
    return true;
  }
  return m_plot->savePng(path, w, h);
}

}  // namespace pipestudio::viz
