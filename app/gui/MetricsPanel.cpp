#include "MetricsPanel.hpp"

#include <QHeaderView>
#include <QLabel>
#include <QLocale>
#include <QScrollArea>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "GuiText.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/model/Caveats.hpp"
#include "pipestudio/viz/MemoryBreakdownView.hpp"
#include "pipestudio/viz/MetricsModel.hpp"

namespace pipestudio::gui {

namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }
QString bytes(double b) { return q(formatBytes(b)); }

std::int64_t peakOf(const Metrics& m) {
  std::int64_t peak = 0;
  for (const auto& d : m.devices) peak = std::max(peak, d.peakMemoryBytes);
  return peak;
}

/// " (+3.1 %)" in green when better, red when worse; nothing without a baseline value.
QString delta(double now, double before, bool lowerIsBetter, const QString& text) {
  if (before == 0) return {};
  const double rel = (now - before) / std::abs(before);
  if (std::abs(rel) < 1e-9) return QStringLiteral(" <span style='color:gray'>(=)</span>");
  const bool better = lowerIsBetter ? rel < 0 : rel > 0;
  return QStringLiteral(" <span style='color:%1'>(%2%3)</span>")
      .arg(better ? QStringLiteral("#2e9d4a") : QStringLiteral("#d03a3a"), rel > 0 ? QStringLiteral("+") : QString(),
           text.isEmpty() ? QStringLiteral("%1 %").arg(rel * 100, 0, 'f', 1) : text);
}

QString layoutText(const PlanConfig& c) { return viz::layoutText(c) + QStringLiteral(" = %1 GPUs").arg(c.totalGpus()); }

QString extrasText(const Parallelism& par) {
  QStringList extras;
  if (par.sequenceParallel) extras << QStringLiteral("SP");
  if (par.zeroStage > 0) extras << QStringLiteral("ZeRO %1").arg(par.zeroStage);
  if (par.recompute != Recompute::None)
    extras << QStringLiteral("recompute %1").arg(q(std::string(recomputeName(par.recompute))));
  return extras.join(QStringLiteral(" · "));
}

}  // namespace

MetricsPanel::MetricsPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  m_model = new viz::MetricsModel(this);
  m_stale = new QLabel(this);
  m_stale->setObjectName(QStringLiteral("MetricsStale"));
  m_stale->setWordWrap(true);
  m_stale->setTextFormat(Qt::PlainText);
  m_stale->setMargin(4);
  m_stale->setStyleSheet(QStringLiteral("QLabel { background: #fff3cd; color: #5c4000; border: 1px solid #d9a406; }"));
  m_stale->setVisible(false);
  layout->addWidget(m_stale);
  auto* split = new QSplitter(Qt::Vertical, this);
  layout->addWidget(split);
  auto* summaryScroll = new QScrollArea(split);
  summaryScroll->setWidgetResizable(true);
  summaryScroll->setFrameShape(QFrame::NoFrame);
  m_summary = new QLabel(summaryScroll);
  m_summary->setObjectName(QStringLiteral("MetricsSummary"));
  m_summary->setTextFormat(Qt::RichText);
  m_summary->setWordWrap(true);
  m_summary->setAlignment(Qt::AlignLeft | Qt::AlignTop);
  m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_summary->setMargin(4);
  summaryScroll->setWidget(m_summary);
  auto* tabs = new QTabWidget(split);
  m_breakdown = new viz::MemoryBreakdownView(tabs);
  tabs->addTab(m_breakdown, QStringLiteral("Memory per GPU"));
  auto* table = new QTableView(tabs);
  table->setModel(m_model);
  table->verticalHeader()->setVisible(false);
  table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table->horizontalHeader()->setStretchLastSection(true);
  table->verticalHeader()->setDefaultSectionSize(table->fontMetrics().height() + 4);
  tabs->addTab(table, QStringLiteral("Devices"));
  split->addWidget(summaryScroll);
  split->addWidget(tabs);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 1);
  split->setSizes({1000, 1000});
}

void MetricsPanel::setPlans(const std::shared_ptr<const Plan>& plan, const std::shared_ptr<const Plan>& baseline,
                            bool pinned) {
  m_model->setPlan(plan);
  m_breakdown->setPlan(plan);
  m_summary->setText(summaryHtml(plan.get(), baseline.get(), pinned));
}

void MetricsPanel::setStale(const QString& label) {
  m_breakdown->setDimmed(!label.isEmpty());
  m_stale->setText(label);
  m_stale->setToolTip(label);
  m_stale->setVisible(!label.isEmpty());
}

QString MetricsPanel::summaryHtml(const Plan* plan, const Plan* baseline, bool pinned) {
  if (!plan) return QStringLiteral("<i>No plan</i>");
  // A measured run without op ranges has no makespan or bubble of its own to compare (its
  // activity and per-iteration numbers are in the timeline and the Compare tab).
  if (plan->ops.empty())
    return QStringLiteral(
        "<i>A measured run without op ranges: its GPU activity is in the timeline, its busy and "
        "idle time per device and iteration in the Compare tab.</i>");
  const Metrics m = viz::metricsOf(*plan);
  const std::int64_t peak = peakOf(m);
  // A baseline of another model compares unlike things (a percentage in the millions): named,
  // no deltas. Measured runs carry no model name and compare with their plan.
  const bool otherModel = baseline && !baseline->model.name.empty() && !plan->model.name.empty() &&
                          baseline->model.name != plan->model.name;
  const Metrics b = baseline && !otherModel ? viz::metricsOf(*baseline) : Metrics{};
  const std::int64_t basePeak = peakOf(b);
  const bool base = baseline != nullptr && !otherModel;
  QString html = QStringLiteral("<table cellspacing='2'>");
  auto row = [&](const QString& name, const QString& value, const QString& d) {
    // A value and its Δ never wrap apart in the narrow dock.
    html += QStringLiteral("<tr><td>%1</td><td align='right' style='white-space:nowrap'><b>%2</b>%3</td></tr>")
                .arg(name, value, d);
  };
  // Settings that may run long wrap across both columns (a nowrap cell would widen the table
  // past the narrow dock and push every number out of sight).
  auto wideRow = [&](const QString& name, const QString& value) {
    html += QStringLiteral("<tr><td colspan='2'>%1: <b>%2</b></td></tr>").arg(name, value.toHtmlEscaped());
  };
  const PlanConfig& c = plan->config;
  row(QStringLiteral("Schedule"), q(c.schedule), QString());
  row(QStringLiteral("Layout"), layoutText(c), QString());
  if (const QString extras = extrasText(c.parallel); !extras.isEmpty()) row(QString(), extras, QString());
  // Every setting that changes the numbers is on screen: the experts' and the recipe's, and
  // those the solver panel has no field for.
  if (const QString moe = moeSettingsText(c); !moe.isEmpty()) wideRow(QStringLiteral("Experts"), moe);
  if (c.precision != Precision::Bf16)
    row(QStringLiteral("Precision"), q(std::string(precisionName(c.precision))), QString());
  if (const QStringList other = hiddenSettings(c); !other.isEmpty())
    wideRow(QStringLiteral("Also"), other.join(QStringLiteral(" · ")));
  row(QStringLiteral("Makespan"), q(formatMs(m.makespanMs)),
      base ? delta(m.makespanMs, b.makespanMs, true, {}) : QString());
  if (m.iterationMs > 0) {
    row(QStringLiteral("Iteration"), q(formatMs(m.iterationMs)),
        base ? delta(m.iterationMs, b.iterationMs, true, {}) : QString());
    row(QStringLiteral("&nbsp;&nbsp;gradient sync (exposed)"), q(formatMs(m.gradientSyncMs)), QString());
    row(QStringLiteral("&nbsp;&nbsp;optimizer step"), q(formatMs(m.optimizerMs)), QString());
  }
  row(QStringLiteral("Bubble ratio"), QStringLiteral("%1 %").arg(m.bubbleRatio * 100, 0, 'f', 1),
      base ? delta(m.bubbleRatio, b.bubbleRatio, true,
                   QStringLiteral("%1 pp").arg((m.bubbleRatio - b.bubbleRatio) * 100, 0, 'f', 1))
           : QString());
  row(QStringLiteral("Throughput"), QStringLiteral("%1 samples/s").arg(m.throughputSamplesPerS, 0, 'f', 1),
      base ? delta(m.throughputSamplesPerS, b.throughputSamplesPerS, false, {}) : QString());
  if (m.tokensPerS > 0) {
    row(QStringLiteral("Tokens/s"), QLocale().toString(m.tokensPerS, 'f', 0),
        base ? delta(m.tokensPerS, b.tokensPerS, false, {}) : QString());
  }
  if (m.modelTflopsPerGpu > 0) {
    row(QStringLiteral("Model TFLOP/s per GPU"), QString::number(m.modelTflopsPerGpu, 'f', 1),
        base ? delta(m.modelTflopsPerGpu, b.modelTflopsPerGpu, false, {}) : QString());
    row(QStringLiteral("MFU"), QStringLiteral("%1 %").arg(m.mfu * 100, 0, 'f', 1),
        base ? delta(m.mfu, b.mfu, false, QStringLiteral("%1 pp").arg((m.mfu - b.mfu) * 100, 0, 'f', 1)) : QString());
  }
  row(QStringLiteral("Peak memory"), bytes(static_cast<double>(peak)),
      base ? delta(static_cast<double>(peak), static_cast<double>(basePeak), true, {}) : QString());
  row(QStringLiteral("Ops"), QString::number(plan->ops.size()), QString());
  html += QStringLiteral("</table>");
  // What the prediction leaves out for this model and recipe (the CLI's "note:" lines).
  for (const std::string& caveat : costModelCaveats(plan->model, c.parallel))
    html += QStringLiteral("<p><small>Note: %1</small></p>").arg(q(caveat).toHtmlEscaped());
  if (otherModel) {
    html += QStringLiteral("<small>The baseline is a plan of %1: no Δ against another model</small>")
                .arg(q(baseline->model.name).toHtmlEscaped());
  } else if (baseline) {
    html +=
        QStringLiteral("<small>Δ against %1 (%2)</small>")
            .arg(pinned ? QStringLiteral("the pinned baseline") : QStringLiteral("the plan of the current settings"),
                 q(baseline->config.schedule));
  }
  return html;
}

}  // namespace pipestudio::gui
