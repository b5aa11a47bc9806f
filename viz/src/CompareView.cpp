#include "pipestudio/viz/CompareView.hpp"

#include <QCheckBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "pipestudio/common/Units.hpp"
#include "pipestudio/viz/MetricsModel.hpp"
#include "pipestudio/viz/TimelinePlottable.hpp"
#include "pipestudio/viz/TimelineView.hpp"

namespace pipestudio::viz {

namespace {

QString planTitle(const QString& role, const Plan* plan) {
  if (!plan) return role + QStringLiteral(": none (pin a plan as baseline)");
  // What tells two plans apart: schedule, the layout (TP / CP / EP / DP around the pipeline),
  // recomputation and ZeRO, then the batch.
  const PlanConfig& c = plan->config;
  const Parallelism& par = c.parallel;
  QStringList parts{QString::fromStdString(c.schedule), layoutWithExpertsText(c),
                    QStringLiteral("%1 microbatches").arg(c.trainingMicrobatches())};
  if (c.chunksPerDevice > 1) parts << QStringLiteral("%1 chunks").arg(c.chunksPerDevice);
  if (par.recompute != Recompute::None)
    parts << QStringLiteral("recompute %1")
                 .arg(QString::fromUtf8(recomputeName(par.recompute).data(),
                                        static_cast<int>(recomputeName(par.recompute).size())));
  if (par.zeroStage > 0) parts << QStringLiteral("ZeRO %1").arg(par.zeroStage);
  return role + QStringLiteral(": ") + parts.join(QStringLiteral(" · "));
}

QTableView* makeTableView(QAbstractItemModel* model, QWidget* parent) {
  auto* view = new QTableView(parent);
  view->setModel(model);
  view->verticalHeader()->setVisible(false);
  view->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  view->setAlternatingRowColors(true);
  return view;
}

}  // namespace

Plan scaledPlan(const Plan& plan, double factor) {
  Plan out = plan;
  scaleSpans(out.ops, factor);
  scaleSpans(out.comms, factor);
  return out;
}

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  auto* noteRow = new QHBoxLayout;
  noteRow->setContentsMargins(6, 2, 6, 0);
  m_note = new QLabel(this);
  m_note->setObjectName(QStringLiteral("CompareNote"));
  m_note->setWordWrap(true);
  m_note->setVisible(false);
  m_scaleBox = new QCheckBox(QStringLiteral("Scale to the plan"), this);
  m_scaleBox->setToolTip(
      QStringLiteral("Draw the measured run stretched to the plan's length (its clock is not the plan's: another "
                     "backend or GPU); the tables keep the measured times"));
  m_scaleBox->setVisible(false);
  noteRow->addWidget(m_note, 1);
  noteRow->addWidget(m_scaleBox, 0, Qt::AlignTop);
  layout->addLayout(noteRow);
  auto* splitter = new QSplitter(Qt::Vertical, this);
  layout->addWidget(splitter, 1);
  m_plot = new TimelinePlot(splitter);
  m_tables = new QTabWidget(splitter);
  m_model = new CompareModel(this);
  m_table = makeTableView(m_model, m_tables);
  m_tables->addTab(m_table, QStringLiteral("Summary"));
  splitter->addWidget(m_plot);
  splitter->addWidget(m_tables);
  // The tables get two fifths: the summary's rows (and the run-vs-plan tables) read without
  // scrolling three lines at a time.
  splitter->setStretchFactor(0, 3);
  splitter->setStretchFactor(1, 2);
  m_tables->setMinimumHeight(8 * fontMetrics().height());
  connect(m_scaleBox, &QCheckBox::toggled, this, &CompareView::setScaleMeasured);

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

void CompareView::setPlans(std::shared_ptr<const Plan> baseline, std::shared_ptr<const Plan> current,
                           bool currentMeasured) {
  m_baseline = std::move(baseline);
  m_current = std::move(current);
  m_currentMeasured = currentMeasured;
  m_measured.reset();
  m_scale = 1.0;
  rebuild();
}

void CompareView::setMeasured(std::shared_ptr<const Plan> plan, std::shared_ptr<const Plan> current, MeasuredRun run) {
  m_baseline = std::move(plan);
  m_current = std::move(current);
  m_measured = std::move(run);
  m_currentMeasured = true;
  const bool scale = m_measured->scaleByDefault;
  m_scale = 1.0;
  {
    const QSignalBlocker block(m_scaleBox);
    m_scaleBox->setChecked(scale);
  }
  setScaleMeasured(scale);
}

void CompareView::setScaleMeasured(bool scale) {
  m_scale = 1.0;
  if (scale && m_measured && m_baseline && m_measured->lengthMs > 0) {
    const double planMs = metricsOf(*m_baseline).makespanMs;
    if (planMs > 0) m_scale = planMs / m_measured->lengthMs;
  }
  if (m_scaleBox->isChecked() != scale) {
    const QSignalBlocker block(m_scaleBox);
    m_scaleBox->setChecked(scale);
  }
  rebuild();
}

QString CompareView::currentTitle() const { return m_bottomTitle->text(); }

QString CompareView::note() const { return m_measured ? m_note->text() : QString(); }

void CompareView::rebuild() {
  // The measured side is drawn at m_scale; the tables keep what was measured.
  std::shared_ptr<const Plan> drawn = m_current;
  std::shared_ptr<const ActivityTrace> activity = m_measured ? m_measured->activity : nullptr;
  if (m_measured && m_scale != 1.0) {
    if (m_current) drawn = std::make_shared<const Plan>(scaledPlan(*m_current, m_scale));
    if (activity) activity = std::make_shared<const ActivityTrace>(activity->scaled(m_scale));
  }
  auto a = m_baseline ? std::make_shared<const TimelineData>(m_baseline) : nullptr;
  auto b = drawn ? std::make_shared<const TimelineData>(drawn, activity) : nullptr;
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
  m_topTitle->setText(
      planTitle(m_currentMeasured ? QStringLiteral("Plan") : QStringLiteral("Baseline"), m_baseline.get()));
  if (m_measured) {
    QString title = QStringLiteral("Measured: ") + m_measured->label;
    if (m_scale != 1.0) title += QStringLiteral(" (drawn ×%1)").arg(m_scale, 0, 'g', 3);
    m_bottomTitle->setText(title);
    QString note = QStringLiteral("<b>Measured</b> %1, against its plan.").arg(m_measured->label.toHtmlEscaped());
    if (m_scale != 1.0) {
      note += QStringLiteral(
                  " Drawn scaled ×%1 so one measured iteration (%2) spans the plan's makespan; the tables "
                  "keep the measured times.")
                  .arg(m_scale, 0, 'g', 3)
                  .arg(QString::fromStdString(formatMs(m_measured->lengthMs)));
    } else {
      note += QStringLiteral(" Drawn at the measured times, aligned at its first iteration's start.");
    }
    if (m_measured->iterations > 0) note += QStringLiteral(" %1 iteration(s) measured.").arg(m_measured->iterations);
    m_note->setText(note);
  } else {
    m_bottomTitle->setText(
        planTitle(m_currentMeasured ? QStringLiteral("Measured") : QStringLiteral("Current"), m_current.get()));
  }
  m_note->setVisible(m_measured.has_value());
  m_scaleBox->setVisible(m_measured.has_value());
  m_model->setPlans(m_baseline, m_current, m_measured ? &*m_measured : nullptr, m_currentMeasured);
  rebuildTables();
  fitToView();
}

void CompareView::rebuildTables() {
  while (m_tables->count() > 1) {
    QWidget* page = m_tables->widget(1);
    m_tables->removeTab(1);
    page->deleteLater();
  }
  if (!m_measured) return;
  for (const ReportTable& table : m_measured->tables) {
    auto* model = new ReportTableModel(m_tables);
    model->setTable(table);
    QTableView* view = makeTableView(model, m_tables);
    model->setParent(view);
    m_tables->addTab(view, table.title);
  }
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
