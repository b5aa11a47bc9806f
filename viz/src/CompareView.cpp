#include "pipestudio/viz/CompareView.hpp"

#include <QHeaderView>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>
#include <algorithm>

#include "pipestudio/viz/MetricsModel.hpp"
#include "pipestudio/viz/TimelinePlottable.hpp"
#include "pipestudio/viz/TimelineView.hpp"

namespace pipestudio::viz {

namespace {

QString planTitle(const QString& role, const Plan* plan) {
  if (!plan) return role + QStringLiteral(": none (pin a plan as baseline)");
  return QStringLiteral("%1: %2, %3 devices, %4 microbatches, %5 chunks")
      .arg(role, QString::fromStdString(plan->config.schedule))
      .arg(plan->config.devices)
      .arg(plan->config.microbatches)
      .arg(plan->config.chunksPerDevice);
}

}  // namespace

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  auto* splitter = new QSplitter(Qt::Vertical, this);
  layout->addWidget(splitter);
  m_plot = new TimelinePlot(splitter);
  m_table = new QTableView(splitter);
  m_model = new CompareModel(this);
  m_table->setModel(m_model);
  m_table->verticalHeader()->setVisible(false);
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  m_table->setAlternatingRowColors(true);
  splitter->addWidget(m_plot);
  splitter->addWidget(m_table);
  splitter->setStretchFactor(0, 3);
  splitter->setStretchFactor(1, 1);

  QCPLayoutGrid* grid = m_plot->plotLayout();
  grid->clear();
  m_topTitle = new QCPTextElement(m_plot, QString(), QFont(font().family(), font().pointSize(), QFont::Bold));
  m_top = new QCPAxisRect(m_plot);
  m_bottomTitle = new QCPTextElement(m_plot, QString(), QFont(font().family(), font().pointSize(), QFont::Bold));
  m_bottom = new QCPAxisRect(m_plot);
  grid->addElement(1, 0, m_topTitle);
  grid->addElement(2, 0, m_top);
  grid->addElement(3, 0, m_bottomTitle);
  grid->addElement(4, 0, m_bottom);
  grid->setRowSpacing(0);
  auto* group = new QCPMarginGroup(m_plot);
  m_top->setMarginGroup(QCP::msLeft | QCP::msRight, group);
  m_bottom->setMarginGroup(QCP::msLeft | QCP::msRight, group);
  m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  setupTimelineAxes(m_top, 1);
  setupTimelineAxes(m_bottom, 1);
  m_bottom->axis(QCPAxis::atBottom)->setLabel(QStringLiteral("time"));
  m_baselineTimeline = new TimelinePlottable(m_top->axis(QCPAxis::atBottom), m_top->axis(QCPAxis::atLeft));
  m_currentTimeline = new TimelinePlottable(m_bottom->axis(QCPAxis::atBottom), m_bottom->axis(QCPAxis::atLeft));
  m_legend = new TimelineLegend(m_plot, m_currentTimeline);
  m_legend->setOverlayEntries(false);  // the compare view draws no critical path or selection
  grid->addElement(0, 0, m_legend);
  m_topTicker = QSharedPointer<TimeAxisTicker>::create();
  m_bottomTicker = QSharedPointer<TimeAxisTicker>::create();
  m_top->axis(QCPAxis::atBottom)->setTicker(m_topTicker);
  m_bottom->axis(QCPAxis::atBottom)->setTicker(m_bottomTicker);
  const TimelinePalette palette = TimelinePalette::forPalette(this->palette());
  m_baselineTimeline->setTimelinePalette(palette);
  m_currentTimeline->setTimelinePalette(palette);
  m_plot->setBackground(this->palette().color(QPalette::Base));
  for (QCPAxisRect* rect : {m_top, m_bottom}) {
    rect->setBackground(this->palette().color(QPalette::Base));
    for (QCPAxis* axis : rect->axes()) {
      axis->setBasePen(QPen(this->palette().color(QPalette::WindowText)));
      axis->setTickLabelColor(this->palette().color(QPalette::WindowText));
      axis->setLabelColor(this->palette().color(QPalette::WindowText));
    }
    connect(rect->axis(QCPAxis::atBottom), qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this,
            &CompareView::onRangeChanged);
  }
  m_topTitle->setTextColor(this->palette().color(QPalette::WindowText));
  m_bottomTitle->setTextColor(this->palette().color(QPalette::WindowText));
  connect(m_plot, &TimelinePlot::rubberBandZoom, this, [this](const QRect& rect) {
    if (rect.width() < 4) return;
    QCPAxis* axis = m_top->axis(QCPAxis::atBottom);
    m_top->axis(QCPAxis::atBottom)->setRange(axis->pixelToCoord(rect.left()), axis->pixelToCoord(rect.right()));
    m_plot->replot(QCustomPlot::rpQueuedReplot);
  });
  connect(m_plot, &QCustomPlot::mouseDoubleClick, this, [this](QMouseEvent*) { fitToView(); });
  setPlans(nullptr, nullptr);
}

void CompareView::setPlans(std::shared_ptr<const Plan> baseline, std::shared_ptr<const Plan> current) {
  m_baseline = std::move(baseline);
  m_current = std::move(current);
  auto a = m_baseline ? std::make_shared<const TimelineData>(m_baseline) : nullptr;
  auto b = m_current ? std::make_shared<const TimelineData>(m_current) : nullptr;
  m_baselineTimeline->setTimeline(a);
  m_currentTimeline->setTimeline(b);
  const int devicesA = a ? a->deviceCount() : 1;
  const int devicesB = b ? b->deviceCount() : 1;
  setupTimelineAxes(m_top, devicesA);
  setupTimelineAxes(m_bottom, devicesB);
  // Each plot's height follows its device count so lanes have the same thickness in both.
  m_plot->plotLayout()->setRowStretchFactor(2, std::max(1, devicesA));
  m_plot->plotLayout()->setRowStretchFactor(4, std::max(1, devicesB));
  m_plot->plotLayout()->setRowStretchFactor(0, 0.01);
  m_plot->plotLayout()->setRowStretchFactor(1, 0.01);
  m_plot->plotLayout()->setRowStretchFactor(3, 0.01);
  // The legend names what either plan holds (a measured run has no transfers, its plan does).
  m_legend->setTimelineSource(m_currentTimeline->timeline() && !m_currentTimeline->timeline()->empty()
                                  ? m_currentTimeline
                                  : m_baselineTimeline);
  m_topTitle->setText(planTitle(QStringLiteral("Baseline"), m_baseline.get()));
  m_bottomTitle->setText(planTitle(QStringLiteral("Current"), m_current.get()));
  m_model->setPlans(m_baseline, m_current);
  fitToView();
}

QCPRange CompareView::visibleRange() const { return m_top->axis(QCPAxis::atBottom)->range(); }

void CompareView::fitToView() {
  double lo = 0;
  double hi = 1;
  bool any = false;
  for (const TimelinePlottable* t : {m_baselineTimeline, m_currentTimeline}) {
    const TimelineData* data = t->timeline();
    if (!data || data->endMs() <= data->beginMs()) continue;
    lo = any ? std::min(lo, data->beginMs()) : data->beginMs();
    hi = any ? std::max(hi, data->endMs()) : data->endMs();
    any = true;
  }
  const double pad = (hi - lo) * 0.01;
  m_top->axis(QCPAxis::atBottom)->setRange(lo - pad, hi + pad);
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void CompareView::onRangeChanged(const QCPRange& range) {
  if (m_syncing) return;
  m_syncing = true;
  m_top->axis(QCPAxis::atBottom)->setRange(range);
  m_bottom->axis(QCPAxis::atBottom)->setRange(range);
  m_topTicker->setWindow(range.size());
  m_bottomTicker->setWindow(range.size());
  m_bottom->axis(QCPAxis::atBottom)
      ->setLabel(QStringLiteral("time (%1)").arg(TimeAxisTicker::unitName(m_bottomTicker->unit())));
  m_syncing = false;
}

bool CompareView::exportImage(const QString& path, int width, int height) {
  return m_plot->savePng(path, width, height);
}

}  // namespace pipestudio::viz
