#include "pipestudio/viz/TimelineView.hpp"

#include <QApplication>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QScrollBar>
#include <QSvgGenerator>
#include <QToolButton>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <limits>

#include "MemoryTrack.hpp"
#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/viz/TimelinePlottable.hpp"

namespace pipestudio::viz {

namespace {

/// A device lane is legible from this height on (labels fit; ops tell apart).
constexpr double kMinDevicePx = 16.0;
/// Wheel zoom per notch (120 units), as QCustomPlot's default range zoom factor.
constexpr double kWheelZoomPerNotch = 0.85;

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

QString q(const std::string& s) { return QString::fromStdString(s); }

}  // namespace

// --- TimeAxisTicker -----------------------------------------------------------------------

TimeAxisTicker::Unit TimeAxisTicker::unitFor(double windowMs) {
  if (windowMs < 2.0) return Unit::Us;
  // Seconds once the ticks are a second or more apart (an 11 s iteration reads "2.5 s … 10 s",
  // not "10000 ms"), microseconds while they are below a millisecond.
  if (windowMs > 5000.0) return Unit::S;
  return Unit::Ms;
}

QString TimeAxisTicker::unitName(Unit unit) {
  switch (unit) {
    case Unit::Us:
      return QStringLiteral("µs");
    case Unit::S:
      return QStringLiteral("s");
    case Unit::Ms:
      break;
  }
  return QStringLiteral("ms");
}

double TimeAxisTicker::getTickStep(const QCPRange& range) {
  const double perUnit = m_unit == Unit::Us ? 1e-3 : (m_unit == Unit::S ? 1e3 : 1.0);
  const double exact = range.size() / perUnit / (static_cast<double>(mTickCount) + 1e-10);
  m_stepInUnit = cleanMantissa(exact);
  return m_stepInUnit * perUnit;
}

QString TimeAxisTicker::getTickLabel(double tick, const QLocale& locale, QChar, int) {
  const double perUnit = m_unit == Unit::Us ? 1e-3 : (m_unit == Unit::S ? 1e3 : 1.0);
  // As many decimals as the step needs: a 2.5 s step reads "2.5 s, 5 s, 7.5 s", not "3 s, 5 s, 8 s".
  int decimals = 0;
  while (decimals < 6 && m_stepInUnit > 0) {
    const double scaled = m_stepInUnit * std::pow(10.0, decimals);
    if (std::abs(scaled - std::round(scaled)) <= 1e-6 * std::max(1.0, scaled)) break;
    ++decimals;
  }
  double value = tick / perUnit;
  if (std::abs(value) < 1e-9 * std::max(1.0, m_stepInUnit)) value = 0;  // no "-0"
  return locale.toString(value, 'f', decimals) + QLatin1Char(' ') + unitName(m_unit);
}

// --- TimelinePlot -------------------------------------------------------------------------

TimelinePlot::TimelinePlot(QWidget* parent) : QCustomPlot(parent) {
  setMouseTracking(true);
  setNoAntialiasingOnDrag(true);
  setSelectionRectMode(QCP::srmNone);
  connect(selectionRect(), &QCPSelectionRect::accepted, this,
          [this](const QRect& rect, QMouseEvent*) { Q_EMIT rubberBandZoom(rect); });
}

void TimelinePlot::mousePressEvent(QMouseEvent* event) {
  m_pressPos = event->pos();
  m_pressed = true;
  // Ctrl+drag measures a range: neither panning nor a rubber band.
  m_measuring = event->button() == Qt::LeftButton && (event->modifiers() & Qt::ControlModifier);
  if (m_measuring) {
    Q_EMIT measureDragged(event->position().x(), event->position().x(), false);
    return;
  }
  // Shift+drag draws a rubber band that zooms to its time window; a plain drag pans.
  setSelectionRectMode((event->modifiers() & Qt::ShiftModifier) ? QCP::srmCustom : QCP::srmNone);
  QCustomPlot::mousePressEvent(event);
}

void TimelinePlot::mouseMoveEvent(QMouseEvent* event) {
  if (m_measuring) {
    Q_EMIT measureDragged(m_pressPos.x(), event->position().x(), false);
    return;
  }
  QCustomPlot::mouseMoveEvent(event);
  if (event->buttons() == Qt::NoButton)
    Q_EMIT hoverMoved(event->position());
  else if (m_pressed && (event->pos() - m_pressPos).manhattanLength() > 3)
    Q_EMIT dragged();
}

void TimelinePlot::mouseReleaseEvent(QMouseEvent* event) {
  if (m_measuring) {
    m_measuring = false;
    m_pressed = false;
    Q_EMIT measureDragged(m_pressPos.x(), event->position().x(), true);
    return;
  }
  const bool click =
      m_pressed && (event->pos() - m_pressPos).manhattanLength() <= 3 && event->button() == Qt::LeftButton;
  m_pressed = false;
  QCustomPlot::mouseReleaseEvent(event);
  setSelectionRectMode(QCP::srmNone);
  if (click) Q_EMIT clicked(event->position());
}

void TimelinePlot::wheelEvent(QWheelEvent* event) {
  if (!m_ownerWheel) {
    QCustomPlot::wheelEvent(event);
    return;
  }
  // The whole delta of the event counts: a fast flick delivers several notches in one event
  // (or a touchpad many small ones), and each must zoom by exactly its share.
  double steps = event->angleDelta().y() / 120.0;
  if (steps == 0 && event->angleDelta().x() != 0) steps = event->angleDelta().x() / 120.0;
  if (steps == 0 && !event->pixelDelta().isNull()) steps = event->pixelDelta().y() / 120.0;
  if (steps != 0) Q_EMIT wheelSteps(steps, event->position(), event->modifiers());
  event->accept();
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
  rect->setRangeZoomFactor(kWheelZoomPerNotch);
}

// --- TimelineView -------------------------------------------------------------------------

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(0);
  layout->addWidget(buildSearchBar());
  auto* row = new QHBoxLayout;
  row->setContentsMargins(0, 0, 0, 0);
  row->setSpacing(0);
  m_plot = new TimelinePlot(this);
  m_plot->setWheelHandledByOwner(true);
  row->addWidget(m_plot, 1);
  m_laneScroll = new QScrollBar(Qt::Vertical, this);
  m_laneScroll->setVisible(false);
  row->addWidget(m_laneScroll);
  layout->addLayout(row, 1);
  setFocusPolicy(Qt::StrongFocus);

  buildPlotLayout();
  setupAxes();
  m_plot->addLayer(QStringLiteral("highlights"), m_plot->layer(QStringLiteral("main")), QCustomPlot::limAbove);
  m_plot->layer(QStringLiteral("highlights"))->setMode(QCPLayer::lmBuffered);
  m_overlay = new TimelineOverlay(m_timeline);
  m_overlay->setLayer(QStringLiteral("highlights"));
  m_memory = std::make_unique<MemoryTrack>(m_plot, m_memoryRect, [this]() { requestReplot(); });
  m_staleItem =
      hiddenRectText(m_plot, m_timelineRect, QPointF(0.5, 0.02), Qt::AlignHCenter | Qt::AlignTop, QMargins(8, 4, 8, 4));
  connectPlot();
  applyPalette();
}

QWidget* TimelineView::buildSearchBar() {
  // Search bar (Ctrl+F), hidden until asked for.
  m_searchBar = new QWidget(this);
  auto* searchLayout = new QHBoxLayout(m_searchBar);
  searchLayout->setContentsMargins(4, 2, 4, 2);
  searchLayout->addWidget(new QLabel(QStringLiteral("Find:"), m_searchBar));
  m_search = new QLineEdit(m_searchBar);
  m_search->setObjectName(QStringLiteral("TimelineSearch"));
  m_search->setPlaceholderText(QStringLiteral("mb 7 · W · vs 12 · gpu 3 · F B mb 4-7 (Enter: next match, Esc: close)"));
  m_search->setClearButtonEnabled(true);
  searchLayout->addWidget(m_search, 1);
  m_searchSummary = new QLabel(m_searchBar);
  searchLayout->addWidget(m_searchSummary);
  auto* close = new QToolButton(m_searchBar);
  close->setText(QStringLiteral("✕"));
  close->setAutoRaise(true);
  searchLayout->addWidget(close);
  m_searchBar->setVisible(false);
  connect(m_search, &QLineEdit::textChanged, this, [this](const QString& text) { setSearch(text); });
  connect(m_search, &QLineEdit::returnPressed, this, [this]() { nextMatch(); });
  connect(close, &QToolButton::clicked, this, [this]() {
    m_search->clear();
    m_searchBar->setVisible(false);
    setFocus();
  });
  return m_searchBar;
}

void TimelineView::buildPlotLayout() {
  // Rows: title (hidden unless exported with it), legend, lanes, memory.
  m_plot->plotLayout()->clear();
  m_title = new QCPTextElement(m_plot, QString(), QFont(font().family(), font().pointSize(), QFont::Bold));
  m_timelineRect = new QCPAxisRect(m_plot);
  m_memoryRect = new QCPAxisRect(m_plot);
  m_plot->plotLayout()->addElement(0, 0, m_title);
  m_timeline = new TimelinePlottable(m_timelineRect->axis(QCPAxis::atBottom), m_timelineRect->axis(QCPAxis::atLeft));
  m_legend = new TimelineLegend(m_plot, m_timeline);
  m_plot->plotLayout()->addElement(1, 0, m_legend);
  m_plot->plotLayout()->addElement(2, 0, m_timelineRect);
  m_plot->plotLayout()->addElement(3, 0, m_memoryRect);
  m_plot->plotLayout()->setRowStretchFactor(0, 0.001);
  m_plot->plotLayout()->setRowStretchFactor(1, 0.001);
  m_plot->plotLayout()->setRowStretchFactor(2, 3.0);
  m_plot->plotLayout()->setRowStretchFactor(3, 1.0);
  m_plot->plotLayout()->setRowSpacing(2);
  m_title->setVisible(false);
  auto* group = new QCPMarginGroup(m_plot);
  m_timelineRect->setMarginGroup(QCP::msLeft | QCP::msRight, group);
  m_memoryRect->setMarginGroup(QCP::msLeft | QCP::msRight, group);
  m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  m_plot->setAutoAddPlottableToLegend(false);  // memory curves join the memory legend only when few
}

void TimelineView::setupAxes() {
  setupTimelineAxes(m_timelineRect, 1);
  m_laneTicker = QSharedPointer<QCPAxisTickerText>::create();
  m_timelineRect->axis(QCPAxis::atLeft)->setTicker(m_laneTicker);
  m_timeTicker = QSharedPointer<TimeAxisTicker>::create();
  m_memoryTimeTicker = QSharedPointer<TimeAxisTicker>::create();
  m_timelineRect->axis(QCPAxis::atBottom)->setTicker(m_timeTicker);
  m_timelineRect->axis(QCPAxis::atBottom)->setTickLabels(true);
  m_memoryRect->axis(QCPAxis::atBottom)->setTicker(m_memoryTimeTicker);
  m_memoryRect->setRangeDrag(Qt::Horizontal);
  m_memoryRect->setRangeZoom(Qt::Horizontal);
  m_memoryRect->setRangeZoomFactor(kWheelZoomPerNotch);
  m_memoryRect->axis(QCPAxis::atBottom)->setLabel(QStringLiteral("time"));
  m_memoryRect->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("memory (GiB)"));
  auto numberTicker = QSharedPointer<QCPAxisTicker>::create();
  numberTicker->setTickCount(3);
  m_memoryRect->axis(QCPAxis::atLeft)->setTicker(numberTicker);
}

void TimelineView::connectPlot() {
  connect(m_plot, &QCustomPlot::legendClick, this, [this](QCPLegend*, QCPAbstractLegendItem* item, QMouseEvent*) {
    const int device = m_memory->deviceOfLegendItem(item);
    if (device >= 0) setMemoryCurveVisible(device, !m_memory->graphs()[static_cast<std::size_t>(device)]->visible());
  });
  connect(m_timelineRect->axis(QCPAxis::atBottom), qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this,
          &TimelineView::onKeyRangeChanged);
  connect(m_memoryRect->axis(QCPAxis::atBottom), qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this,
          &TimelineView::onKeyRangeChanged);
  connect(m_timelineRect->axis(QCPAxis::atLeft), qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this,
          &TimelineView::onValueRangeChanged);
  connect(m_laneScroll, &QScrollBar::valueChanged, this, [this](int value) {
    if (m_syncing) return;
    m_userLanes = true;
    const QCPRange lanes = visibleLanes();
    setVisibleLanes(value / 100.0, value / 100.0 + lanes.size());
  });
  connect(m_plot, &TimelinePlot::hoverMoved, this, &TimelineView::onHover);
  connect(m_plot, &TimelinePlot::clicked, this, &TimelineView::onClick);
  connect(m_plot, &TimelinePlot::wheelSteps, this, &TimelineView::onWheel);
  connect(m_plot, &TimelinePlot::rubberBandZoom, this, [this](const QRect& rect) {
    if (rect.width() < 4) return;
    QCPAxis* axis = m_timelineRect->axis(QCPAxis::atBottom);
    setVisibleRange(axis->pixelToCoord(rect.left()), axis->pixelToCoord(rect.right()));
  });
  connect(m_plot, &TimelinePlot::measureDragged, this, [this](double fromPx, double toPx, bool finished) {
    QCPAxis* axis = m_timelineRect->axis(QCPAxis::atBottom);
    if (std::abs(toPx - fromPx) < 3) {
      if (finished) measureRange(std::numeric_limits<double>::quiet_NaN(), 0);
      return;
    }
    measureRange(axis->pixelToCoord(fromPx), axis->pixelToCoord(toPx));
  });
  connect(m_plot, &QCustomPlot::mouseDoubleClick, this, [this](QMouseEvent*) { fitToView(); });
  connect(m_plot, &TimelinePlot::dragged, this, [this]() { m_userZoomed = true; });
  connect(m_plot, &QCustomPlot::afterLayout, this, [this]() {
    // Lane heights are known only after layout: refit the lanes (unless the user chose them)
    // and relabel; both take effect on the next frame, requested only when they changed.
    if (!m_userLanes) fitLanes();
    const QStringList before = laneLabels();
    updateLaneTicks();
    if (laneLabels() != before) requestReplot();
  });
}

TimelineView::~TimelineView() = default;

std::shared_ptr<const Plan> TimelineView::plan() const { return m_data ? m_data->planPtr() : nullptr; }

const TimelineData* TimelineView::timeline() const { return m_data.get(); }

void TimelineView::setPlan(std::shared_ptr<const Plan> plan, bool keepRange,
                           std::shared_ptr<const ActivityTrace> activity) {
  const QCPRange previous = visibleRange();
  const QCPRange previousLanes = visibleLanes();
  const double previousSpan = m_data ? m_data->endMs() - m_data->beginMs() : 0.0;
  const int previousDevices = m_data ? m_data->deviceCount() : 0;
  m_activity = std::move(activity);
  m_data = plan ? std::make_shared<const TimelineData>(std::move(plan), m_activity, m_collapsed) : nullptr;
  m_timeline->setTimeline(m_data);
  m_timeline->setOpMask({});
  m_matches.clear();
  m_overlay->setHover({});
  m_overlay->setChain({}, -1);
  m_overlay->setArrows({}, {});
  m_overlay->setMatches({});
  m_overlay->setMeasuredRange(std::numeric_limits<double>::quiet_NaN(), 0);
  m_measurement.reset();
  m_overlay->setCriticalPath(m_showCritical && m_data ? m_data->criticalPath() : std::vector<int>{});
  m_legend->updateEntries();
  const int devices = m_data ? m_data->deviceCount() : 1;
  setupTimelineAxes(m_timelineRect, devices);
  m_timelineRect->axis(QCPAxis::atLeft)->setTicker(m_laneTicker);
  m_memory->rebuild(m_data.get());
  updateTitle();
  const double span = m_data ? m_data->endMs() - m_data->beginMs() : 0.0;
  // A re-solve keeps the window only when the user chose it (zoomed or panned since the last
  // fit) and the new plan is of similar length; otherwise the new plan is shown whole.
  const bool keep =
      keepRange && m_userZoomed && previousSpan > 0 && span > 0 && std::abs(span - previousSpan) < 0.5 * previousSpan;
  if (keep) {
    applyKeyRange(previous.lower, previous.upper);
    if (devices == previousDevices && m_userLanes)
      setVisibleLanes(previousLanes.lower, previousLanes.upper);
    else
      fitLanes();
  } else {
    fitToView();
  }
  if (!m_search->text().trimmed().isEmpty()) setSearch(m_search->text());
  requestReplot();
}

QCPRange TimelineView::visibleRange() const { return m_timelineRect->axis(QCPAxis::atBottom)->range(); }

void TimelineView::applyKeyRange(double fromMs, double toMs) {
  if (toMs < fromMs) std::swap(fromMs, toMs);
  m_timelineRect->axis(QCPAxis::atBottom)->setRange(fromMs, toMs);
  requestReplot();
}

void TimelineView::setVisibleRange(double fromMs, double toMs) {
  m_userZoomed = true;
  applyKeyRange(fromMs, toMs);
}

void TimelineView::zoom(double factor, double centerMs) {
  m_userZoomed = true;
  m_timelineRect->axis(QCPAxis::atBottom)->scaleRange(factor, centerMs);
  requestReplot();
}

void TimelineView::zoom(double factor) {
  const QCPRange r = visibleRange();
  const bool cursor = std::isfinite(m_cursorMs) && m_cursorMs >= r.lower && m_cursorMs <= r.upper;
  zoom(factor, cursor ? m_cursorMs : r.center());
}

void TimelineView::fitSelection() {
  double lo = 0;
  double hi = 0;
  const int op = selectedOp();
  if (m_data && m_data->plan() && inRange(m_data->plan()->ops, op)) {
    // The op and its neighbours on the device, so what it waited for is in view.
    const Op& o = m_data->plan()->op(op);
    lo = o.startMs;
    hi = o.endMs;
    if (const int before = m_data->devicePredecessor(op); before >= 0) lo = m_data->plan()->op(before).startMs;
    if (const int after = m_data->deviceSuccessor(op); after >= 0) hi = m_data->plan()->op(after).endMs;
  } else if (m_measurement) {
    lo = m_measurement->fromMs;
    hi = m_measurement->toMs;
  } else {
    fitToView();
    return;
  }
  const double pad = std::max(1e-6, (hi - lo) * 0.05);
  m_userZoomed = true;
  applyKeyRange(lo - pad, hi + pad);
}

void TimelineView::setLanesCollapsed(bool collapsed) {
  if (collapsed == m_collapsed) return;
  m_collapsed = collapsed;
  const int selected = selectedOp();
  if (m_data) setPlan(m_data->planPtr(), true, m_activity);
  if (selected >= 0) selectOp(selected);
}

void TimelineView::pan(double deltaMs) {
  m_userZoomed = true;
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
  m_fitting = true;
  applyKeyRange(lo - pad, hi + pad);
  m_userLanes = false;
  fitLanes();
  m_fitting = false;
  m_userZoomed = false;
}

void TimelineView::fitLanes() {
  // All lanes when each keeps a legible height, else the first ones that do (the scroll bar,
  // Shift+wheel and ↑/↓ reach the rest).
  const int devices = m_data ? std::max(1, m_data->deviceCount()) : 1;
  const double heightPx = std::max(1, m_timelineRect->height());
  const double fitting = std::max(1.0, std::floor(heightPx / kMinDevicePx));
  const double size = std::min<double>(devices, fitting);
  const QCPRange now = visibleLanes();
  if (std::abs(now.size() - size) < 1e-9 && now.lower >= 0 && now.upper <= devices + 1e-9) {
    updateLaneScrollBar();
    return;
  }
  setVisibleLanes(std::min(now.lower, devices - size), std::min(now.lower, devices - size) + size);
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
  m_timeTicker->setWindow(range.size());
  m_memoryTimeTicker->setWindow(range.size());
  m_memoryRect->axis(QCPAxis::atBottom)
      ->setLabel(QStringLiteral("time (%1)").arg(TimeAxisTicker::unitName(m_timeTicker->unit())));
  m_syncing = false;
  Q_EMIT visibleRangeChanged(range.lower, range.upper);
}

// --- lanes --------------------------------------------------------------------------------

QCPRange TimelineView::visibleLanes() const {
  // The value axis is reversed (device 0 on top); its range is still [lower, upper].
  return m_timelineRect->axis(QCPAxis::atLeft)->range();
}

void TimelineView::setVisibleLanes(double fromDevice, double toDevice) {
  if (toDevice < fromDevice) std::swap(fromDevice, toDevice);
  const double devices = m_data ? std::max(1, m_data->deviceCount()) : 1;
  double size = std::clamp(toDevice - fromDevice, 1.0, devices);
  double lo = std::clamp(fromDevice, 0.0, devices - size);
  m_timelineRect->axis(QCPAxis::atLeft)->setRange(lo, lo + size);
  updateLaneScrollBar();
  updateLaneTicks();
  requestReplot();
}

void TimelineView::zoomLanes(double factor, double center) {
  m_userLanes = true;
  const QCPRange r = visibleLanes();
  const double size = r.size() * factor;
  const double t = r.size() > 0 ? (center - r.lower) / r.size() : 0.5;
  setVisibleLanes(center - t * size, center - t * size + size);
}

void TimelineView::scrollLanes(double deltaDevices) {
  m_userLanes = true;
  const QCPRange r = visibleLanes();
  setVisibleLanes(r.lower + deltaDevices, r.upper + deltaDevices);
}

void TimelineView::onValueRangeChanged(const QCPRange&) {
  if (m_syncing) return;
  updateLaneScrollBar();
}

void TimelineView::updateLaneScrollBar() {
  const double devices = m_data ? std::max(1, m_data->deviceCount()) : 1;
  const QCPRange r = visibleLanes();
  const bool scrollable = r.size() < devices - 1e-9;
  m_syncing = true;
  m_laneScroll->setVisible(scrollable);
  m_laneScroll->setRange(0, static_cast<int>(std::lround((devices - r.size()) * 100)));
  m_laneScroll->setPageStep(static_cast<int>(std::lround(r.size() * 100)));
  m_laneScroll->setSingleStep(100);
  m_laneScroll->setValue(static_cast<int>(std::lround(r.lower * 100)));
  m_syncing = false;
}

void TimelineView::updateLaneTicks() {
  // Labels every device lane that has room for one (a step when they are dense), and names
  // sub-lanes (second pipeline, transfers) once a device is tall enough for them.
  m_laneTicker->clear();
  if (!m_data || m_data->empty()) return;
  const QCPRange r = visibleLanes();
  const double pxPerDevice = m_timelineRect->height() / std::max(1e-9, r.size());
  const QFontMetrics fm(m_timelineRect->axis(QCPAxis::atLeft)->tickLabelFont());
  const double rowPx = fm.height();
  int step = 1;
  while (pxPerDevice * step < rowPx && step < 1 << 20) step *= 2;
  const auto& lanes = m_data->lanes();
  const bool subLabels = pxPerDevice >= 3.2 * rowPx;
  const int first = std::max(0, static_cast<int>(std::floor(r.lower)));
  const int last = std::min(m_data->deviceCount() - 1, static_cast<int>(std::ceil(r.upper)));
  for (std::size_t l = 0; l < lanes.size(); ++l) {
    const Lane& lane = lanes[l];
    if (lane.device < first || lane.device > last) continue;
    const double centre = 0.5 * (lane.valueLo + lane.valueHi);
    if (!subLabels) {
      if (static_cast<int>(l) != m_data->firstLaneOf(lane.device) || lane.device % step != 0) continue;
      m_laneTicker->addTick(lane.device + 0.4, QStringLiteral("GPU %1").arg(lane.device));
      continue;
    }
    if (lane.comm) {
      m_laneTicker->addTick(centre, QStringLiteral("transfers"));
    } else if (lane.activity) {
      m_laneTicker->addTick(
          centre,
          q(m_data->laneName(static_cast<int>(l))).replace(QStringLiteral(" · stream "), QStringLiteral(" · s")));
    } else {
      m_laneTicker->addTick(
          centre,
          q(m_data->laneName(static_cast<int>(l))).replace(QStringLiteral(" · pipeline "), QStringLiteral(" · pipe ")));
    }
  }
}

QStringList TimelineView::laneLabels() const {
  QStringList out;
  for (const QString& label : m_laneTicker->ticks()) out << label;
  return out;
}

void TimelineView::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  if (!m_userLanes) fitLanes();
  if (!m_staleText.isEmpty()) layoutStaleBanner();
}

// --- memory -------------------------------------------------------------------------------

QString TimelineView::memoryLimitLabel() const { return m_memory->limitLabel(); }

void TimelineView::setMemoryLimit(std::int64_t bytes) {
  m_memory->setLimit(bytes);
  m_memory->rebuild(m_data.get());
  requestReplot();
}

const std::vector<QCPGraph*>& TimelineView::memoryGraphs() const { return m_memory->graphs(); }

int TimelineView::highlightedMemoryCurve() const { return m_memory->highlighted(); }

void TimelineView::setMemoryVisible(bool visible) {
  m_memoryRect->setVisible(visible);
  QCPLayoutGrid* grid = m_plot->plotLayout();
  if (visible && !grid->hasElement(3, 0)) grid->addElement(3, 0, m_memoryRect);
  if (!visible) grid->take(m_memoryRect);
  grid->simplify();
  requestReplot();
}

void TimelineView::setMemoryCurveVisible(int device, bool visible) {
  m_memory->setCurveVisible(device, visible, palette().color(QPalette::WindowText));
}

QString TimelineView::memoryReadout(QPointF pixel) { return m_memory->readout(pixel); }

// --- title, stale marker ------------------------------------------------------------------

QString TimelineView::titleText() const {
  const Plan* p = m_data ? m_data->plan() : nullptr;
  if (!p) return {};
  const Metrics m = p->metrics.makespanMs > 0 && !p->metrics.devices.empty() ? p->metrics : computeMetrics(*p);
  QStringList parts;
  if (!p->model.name.empty()) parts << q(p->model.name);
  if (!p->cluster.name.empty()) parts << q(p->cluster.name);
  parts << q(p->config.schedule);
  parts << QStringLiteral("makespan %1").arg(q(formatMs(m.makespanMs)));
  parts << QStringLiteral("bubble %1 %").arg(m.bubbleRatio * 100.0, 0, 'f', 1);
  return parts.join(QStringLiteral(" · "));
}

// A hidden text element still counts in the layout's minimum width: it holds text only while
// shown (on screen or in an export).
void TimelineView::updateTitle() { m_title->setText(m_titleVisible ? titleText() : QString()); }

void TimelineView::setTitleVisible(bool visible) {
  m_titleVisible = visible;
  m_title->setVisible(visible);
  updateTitle();
  requestReplot();
}

bool TimelineView::titleVisible() const { return m_titleVisible; }

void TimelineView::setStale(const QString& label, bool dim) {
  m_staleText = label;
  m_timeline->setDimmed(!label.isEmpty() && dim);
  layoutStaleBanner();
  m_staleItem->setVisible(!label.isEmpty());
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

QString TimelineView::staleBannerText() const { return m_staleItem->text(); }

void TimelineView::layoutStaleBanner() {
  // The banner wraps to the lanes' width (never clipped at the sides), at most four lines.
  const QFontMetrics fm(m_staleItem->font());
  const int width = std::max(80, m_timelineRect->width() - 24);
  QStringList lines;
  QString line;
  for (const QString& word : m_staleText.split(QLatin1Char(' '), Qt::SkipEmptyParts)) {
    const QString candidate = line.isEmpty() ? word : line + QLatin1Char(' ') + word;
    if (!line.isEmpty() && fm.horizontalAdvance(candidate) > width) {
      lines << line;
      line = word;
    } else {
      line = candidate;
    }
  }
  if (!line.isEmpty()) lines << line;
  if (lines.size() > 4) {
    lines = lines.mid(0, 4);
    lines.back() = fm.elidedText(lines.back() + QStringLiteral(" …"), Qt::ElideRight, width);
  }
  for (QString& l : lines) l = fm.elidedText(l, Qt::ElideRight, width);
  m_staleItem->setText(lines.join(QLatin1Char('\n')));
}

// --- selection, search, measurement -------------------------------------------------------

void TimelineView::setShowCriticalPath(bool show) {
  m_showCritical = show;
  m_overlay->setCriticalPath(show && m_data ? m_data->criticalPath() : std::vector<int>{});
  requestReplot();
}

void TimelineView::selectOp(int op) {
  if (!m_data || !m_data->plan() || !inRange(m_data->plan()->ops, op)) {
    m_overlay->setChain({}, -1);
    m_overlay->setArrows({}, {});
  } else {
    m_overlay->setChain(m_data->dependencyChain(op), op);
    m_overlay->setArrows(m_data->dataPredecessors(op), m_data->dataSuccessors(op));
  }
  m_plot->layer(QStringLiteral("highlights"))->replot();
  m_plot->update();
  Q_EMIT opSelected(m_overlay->selectedOp());
}

int TimelineView::selectedOp() const { return m_overlay->selectedOp(); }

void TimelineView::revealOp(int op) {
  if (!m_data || !inRange(m_data->plan()->ops, op)) return;
  const Op& o = m_data->plan()->op(op);
  const QCPRange r = visibleRange();
  if (o.startMs < r.lower || o.endMs > r.upper) {
    const double size = std::max(r.size(), 1.2 * o.durationMs());
    m_userZoomed = true;
    applyKeyRange(0.5 * (o.startMs + o.endMs) - size / 2, 0.5 * (o.startMs + o.endMs) + size / 2);
  }
  const QCPRange lanes = visibleLanes();
  if (o.device < lanes.lower || o.device + 1 > lanes.upper)
    scrollLanes(o.device - lanes.lower - 0.5 * (lanes.size() - 1));
}

std::optional<QString> TimelineView::setSearch(const QString& query) {
  m_matches.clear();
  m_nextMatch = 0;
  std::optional<QString> error;
  if (m_data && !query.trimmed().isEmpty()) {
    auto parsed = parseOpQuery(query.toStdString());
    if (!parsed) {
      error = q(parsed.message());
    } else {
      m_matches = m_data->findOps(*parsed);
    }
  }
  if (m_data && !query.trimmed().isEmpty() && !error) {
    IdVector<char> mask(m_data->plan()->ops.size(), 0);
    for (int op : m_matches) mask[op] = 1;
    m_timeline->setOpMask(std::move(mask));
  } else {
    m_timeline->setOpMask({});
  }
  m_overlay->setMatches(m_matches);
  QString summary;
  if (error)
    summary = *error;
  else if (!query.trimmed().isEmpty())
    summary = QStringLiteral("%1 ops").arg(m_matches.size());
  m_searchSummary->setText(summary);
  m_searchSummary->setStyleSheet(error ? QStringLiteral("QLabel { color: #e53935; }") : QString());
  if (m_search->text() != query) {
    const QSignalBlocker block(m_search);
    m_search->setText(query);
  }
  m_plot->replot(QCustomPlot::rpQueuedReplot);
  Q_EMIT searchChanged(summary);
  return error;
}

bool TimelineView::nextMatch() {
  if (m_matches.empty()) return false;
  // Matches in time order, so Enter walks along the timeline.
  std::vector<int> ordered = m_matches;
  const Plan* p = m_data->plan();
  std::stable_sort(ordered.begin(), ordered.end(), [&](int a, int b) { return p->op(a).startMs < p->op(b).startMs; });
  const int op = ordered[m_nextMatch % ordered.size()];
  ++m_nextMatch;
  revealOp(op);
  selectOp(op);
  return true;
}

void TimelineView::showSearch() {
  m_searchBar->setVisible(true);
  m_search->setFocus();
  m_search->selectAll();
}

void TimelineView::measureRange(double fromMs, double toMs) {
  if (!m_data || !std::isfinite(fromMs) || !std::isfinite(toMs)) {
    m_measurement.reset();
    m_overlay->setMeasuredRange(std::numeric_limits<double>::quiet_NaN(), 0);
  } else {
    m_measurement = m_data->measure(fromMs, toMs);
    m_overlay->setMeasuredRange(m_measurement->fromMs, m_measurement->toMs);
    Q_EMIT rangeMeasured(*m_measurement);
  }
  m_plot->layer(QStringLiteral("highlights"))->replot();
  m_plot->update();
}

// --- mouse and keys -----------------------------------------------------------------------

void TimelineView::onHover(QPointF pixel) {
  const ItemRef ref = pixel.x() < 0 ? ItemRef{} : m_timeline->itemAt(pixel);
  const bool overPlots =
      pixel.x() >= 0 && (m_timelineRect->rect().contains(pixel.toPoint()) ||
                         (m_memoryRect->visible() && m_memoryRect->rect().contains(pixel.toPoint())));
  m_cursorMs = overPlots ? m_timelineRect->axis(QCPAxis::atBottom)->pixelToCoord(pixel.x())
                         : std::numeric_limits<double>::quiet_NaN();
  // The memory plot reads out the curve under the mouse; over the lanes, the hovered device's
  // curve is the highlighted one.
  const QString readout = pixel.x() < 0 ? QString() : memoryReadout(pixel);
  if (readout.isEmpty() && pixel.x() >= 0 && m_timelineRect->rect().contains(pixel.toPoint()) && m_data) {
    const int lane = m_data->laneAt(m_timelineRect->axis(QCPAxis::atLeft)->pixelToCoord(pixel.y()));
    m_memory->highlight(lane >= 0 ? m_data->lane(lane).device : -1);
  } else if (pixel.x() < 0) {
    m_memory->highlight(-1);
  }
  if (!readout.isEmpty()) Q_EMIT hovered(readout);
  if (ref == m_overlay->hover()) return;
  m_overlay->setHover(ref);
  m_plot->layer(QStringLiteral("highlights"))->replot();
  m_plot->update();
  const QString text = m_data && ref.valid() ? QString::fromStdString(m_data->describe(ref)) : QString();
  if (text.isEmpty())
    QToolTip::hideText();
  else
    QToolTip::showText(m_plot->mapToGlobal(pixel.toPoint()) + QPoint(12, 12), text, m_plot);
  if (readout.isEmpty()) Q_EMIT hovered(QString(text).replace(QLatin1Char('\n'), QStringLiteral(" · ")));
}

void TimelineView::onClick(QPointF pixel) {
  const ItemRef ref = m_timeline->itemAt(pixel);
  selectOp(ref.kind == ItemRef::Kind::Op ? ref.index : -1);
}

void TimelineView::onWheel(double steps, QPointF pixel, Qt::KeyboardModifiers modifiers) {
  if (modifiers & Qt::ShiftModifier) {
    scrollLanes(-steps * std::max(1.0, visibleLanes().size() / 8.0));
    return;
  }
  if (modifiers & Qt::ControlModifier) {
    zoomLanes(std::pow(kWheelZoomPerNotch, steps), m_timelineRect->axis(QCPAxis::atLeft)->pixelToCoord(pixel.y()));
    return;
  }
  QCPAxisRect* rect =
      m_memoryRect->visible() && m_memoryRect->rect().contains(pixel.toPoint()) ? m_memoryRect : m_timelineRect;
  zoom(std::pow(kWheelZoomPerNotch, steps), rect->axis(QCPAxis::atBottom)->pixelToCoord(pixel.x()));
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
  m_memory->applyPalette(pal, m_timeline->timelinePalette());
  m_title->setTextColor(pal.color(QPalette::WindowText));
  m_staleItem->setBrush(QColor(0xff, 0xf3, 0xcd, 235));
  m_staleItem->setColor(QColor(0x5c, 0x40, 0x00));
  m_staleItem->setPen(QPen(QColor(0xd9, 0xa4, 0x06)));
  m_legend->updateEntries();
  requestReplot();
}

void TimelineView::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) applyPalette();
}

void TimelineView::keyPressEvent(QKeyEvent* event) {
  const QCPRange range = visibleRange();
  const bool shift = event->modifiers() & Qt::ShiftModifier;
  if (event->matches(QKeySequence::Find)) {
    showSearch();
    return;
  }
  switch (event->key()) {
    case Qt::Key_F:
      fitSelection();
      break;
    case Qt::Key_0:
      fitToView();
      break;
    case Qt::Key_C:
      setLanesCollapsed(!m_collapsed);
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
    case Qt::Key_Up:
      if (shift)
        zoomLanes(0.7, visibleLanes().center());
      else
        scrollLanes(-std::max(1.0, visibleLanes().size() / 4));
      break;
    case Qt::Key_Down:
      if (shift)
        zoomLanes(1.0 / 0.7, visibleLanes().center());
      else
        scrollLanes(std::max(1.0, visibleLanes().size() / 4));
      break;
    case Qt::Key_Escape:
      selectOp(-1);
      measureRange(std::numeric_limits<double>::quiet_NaN(), 0);
      if (m_searchBar->isVisible()) {
        m_search->clear();
        m_searchBar->setVisible(false);
      }
      break;
    default:
      QWidget::keyPressEvent(event);
  }
}

bool TimelineView::exportImage(const QString& path, int width, int height, bool withTitle) {
  const int w = width > 0 ? width : std::max(800, m_plot->width());
  const int h = height > 0 ? height : std::max(500, m_plot->height());
  const bool titleWas = m_title->visible();
  const QString title = titleText();
  m_title->setText(withTitle ? title : QString());
  m_title->setVisible(withTitle && !title.isEmpty());
  const QString lower = path.toLower();
  bool ok = false;
  if (lower.endsWith(QStringLiteral(".pdf"))) {
    ok = m_plot->savePdf(path, w, h);
  } else if (lower.endsWith(QStringLiteral(".jpg")) || lower.endsWith(QStringLiteral(".jpeg"))) {
    ok = m_plot->saveJpg(path, w, h);
  } else if (lower.endsWith(QStringLiteral(".svg"))) {
    QSvgGenerator generator;
    generator.setFileName(path);
    generator.setSize(QSize(w, h));
    generator.setViewBox(QRect(0, 0, w, h));
    generator.setTitle(title.isEmpty() ? QStringLiteral("PipeStudio timeline") : title);
    QCPPainter painter;
    if (painter.begin(&generator)) {
      m_plot->toPainter(&painter, w, h);
      painter.end();
      ok = true;
    }
  } else {
    ok = m_plot->savePng(path, w, h);
  }
  m_title->setVisible(titleWas);
  updateTitle();
  m_plot->replot(QCustomPlot::rpQueuedReplot);
  return ok;
}

}  // namespace pipestudio::viz
