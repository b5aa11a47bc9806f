#include "pipestudio/viz/SelectionPanel.hpp"

#include <QTextBrowser>
#include <QUrl>
#include <QVBoxLayout>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/viz/TimelineView.hpp"

namespace pipestudio::viz {

namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }
QString ms(double v) { return q(formatMs(v)); }

}  // namespace

SelectionPanel::SelectionPanel(TimelineView* view, QWidget* parent) : QWidget(parent), m_view(view) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  m_browser = new QTextBrowser(this);
  m_browser->setObjectName(QStringLiteral("SelectionText"));
  m_browser->setOpenLinks(false);
  m_browser->setOpenExternalLinks(false);
  layout->addWidget(m_browser);
  connect(m_browser, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) { activateLink(url.toString()); });
  connect(m_view, &TimelineView::opSelected, this, [this](int) { rebuild(); });
  connect(m_view, &TimelineView::rangeMeasured, this, [this](const RangeMeasurement&) { rebuild(); });
  rebuild();
}

void SelectionPanel::activateLink(const QString& href) {
  if (!href.startsWith(QStringLiteral("op:"))) return;
  bool ok = false;
  const int op = href.mid(3).toInt(&ok);
  if (!ok) return;
  m_view->revealOp(op);
  m_view->selectOp(op);
}

QString SelectionPanel::plainText() const { return m_browser->toPlainText(); }

void SelectionPanel::rebuild() {
  m_links.clear();
  QString html;
  const int op = m_view->selectedOp();
  if (op >= 0 && m_view->timeline()) {
    html += opHtml(op);
  } else {
    html += QStringLiteral(
        "<p><i>Click an op in the timeline to see its fields, what it waited for, its "
        "neighbours and its slack. Ctrl+drag measures a time range.</i></p>");
  }
  html += measurementHtml();
  m_browser->setHtml(html);
}

QString SelectionPanel::opHtml(int index) {
  const TimelineData& data = *m_view->timeline();
  const Plan& p = *data.plan();
  const Op& op = p.op(index);
  auto link = [&](int other) {
    m_links.push_back(other);
    const Op& o = p.op(other);
    return QStringLiteral("<a href='op:%1'>%2 mb %3 · GPU %4 · vs %5</a>")
        .arg(other)
        .arg(q(std::string(opKindName(o.kind))))
        .arg(o.microbatch)
        .arg(o.device)
        .arg(o.virtualStage);
  };
  auto links = [&](const std::vector<int>& ops) {
    QStringList out;
    for (int o : ops) out << link(o);
    return out.isEmpty() ? QStringLiteral("—") : out.join(QStringLiteral("<br>"));
  };
  QString html = QStringLiteral("<h3 style='margin:2px'>%1 · microbatch %2</h3><table cellspacing='1'>")
                     .arg(q(std::string(opKindName(op.kind))))
                     .arg(op.microbatch);
  auto row = [&](const QString& name, const QString& value) {
    html += QStringLiteral("<tr><td valign='top'><b>%1</b>&nbsp;</td><td>%2</td></tr>").arg(name, value);
  };
  row(QStringLiteral("Device"), QStringLiteral("GPU %1").arg(op.device));
  if (inRange(p.virtualStages, op.virtualStage)) {
    const VirtualStage& vs = p.stage(op.virtualStage);
    QString stage = QStringLiteral("%1 (chunk %2").arg(vs.id).arg(vs.chunk);
    if (vs.pipeline != 0) stage += QStringLiteral(", pipeline %1").arg(vs.pipeline);
    row(QStringLiteral("Virtual stage"), stage + QLatin1Char(')'));
    QString component = QStringLiteral("component %1").arg(vs.component);
    if (inRange(p.model.components, vs.component)) component = q(p.model.component(vs.component).name);
    row(QStringLiteral("Layers"), QStringLiteral("%1 [%2..%3]").arg(component).arg(vs.firstLayer).arg(vs.lastLayer));
  }
  if (op.samples > 0) row(QStringLiteral("Samples"), QString::number(op.samples));
  row(QStringLiteral("Start"), ms(op.startMs));
  row(QStringLiteral("End"), ms(op.endMs));
  row(QStringLiteral("Duration"), ms(op.durationMs()));
  const CollectiveShare share = data.collectiveShare(index);
  if (share.collectiveMs > 0 || share.hiddenMs > 0) {
    row(QStringLiteral("Collectives"), QStringLiteral("%1 exposed, %2 % of %3; %4 hidden (TP/CP/EP/ZeRO)")
                                           .arg(ms(share.collectiveMs))
                                           .arg(share.fraction() * 100.0, 0, 'f', 0)
                                           .arg(ms(share.passMs), ms(share.hiddenMs)));
  }
  const double slack = data.slackMs(index);
  row(QStringLiteral("Slack"), slack <= 1e-6 * std::max(1.0, data.endMs())
                                   ? QStringLiteral("<span style='color:#d01030'>on the critical path</span>")
                                   : QStringLiteral("%1 (could start that much later without delaying the "
                                                    "iteration)")
                                         .arg(ms(slack)));
  const WaitReason why = data.waitReason(index);
  if (why.waitedFor.valid()) {
    QString text = link(why.waitedFor.index);
    text += why.sameDevice ? QStringLiteral(" (device busy)")
                           : QStringLiteral(" (+ %1 transfer/wait)").arg(ms(why.transferMs));
    row(QStringLiteral("Waited for"), text);
  } else {
    row(QStringLiteral("Waited for"), QStringLiteral("nothing (first op)"));
  }
  row(QStringLiteral("Predecessors"), links(data.dataPredecessors(index)));
  row(QStringLiteral("Successors"), links(data.dataSuccessors(index)));
  const int prev = data.devicePredecessor(index);
  const int next = data.deviceSuccessor(index);
  row(QStringLiteral("On this device"),
      QStringLiteral("before: %1<br>after: %2")
          .arg(prev >= 0 ? link(prev) : QStringLiteral("—"), next >= 0 ? link(next) : QStringLiteral("—")));
  html += QStringLiteral("</table>");
  return html;
}

QString SelectionPanel::measurementHtml() const {
  const auto& m = m_view->measurement();
  if (!m) return {};
  QString html = QStringLiteral(
                     "<h3 style='margin:2px'>Range %1 – %2</h3><p>duration <b>%3</b> · idle %4 over "
                     "%5 devices</p><table cellspacing='0' cellpadding='2' border='0'><tr><th align='left'>device</th>"
                     "<th align='right'>busy</th><th align='right'>idle</th><th align='right'>idle %</th></tr>")
                     .arg(ms(m->fromMs), ms(m->toMs), ms(m->durationMs()), ms(m->idleMs()))
                     .arg(m->devices.size());
  for (int d = 0; d < m->devices.size(); ++d) {
    const DeviceRangeUse& u = m->devices[d];
    const double share = m->durationMs() > 0 ? u.idleMs / m->durationMs() : 0.0;
    html += QStringLiteral(
                "<tr><td>GPU %1</td><td align='right'>%2</td><td align='right'>%3</td>"
                "<td align='right'>%4</td></tr>")
                .arg(d)
                .arg(ms(u.busyMs), ms(u.idleMs))
                .arg(share * 100.0, 0, 'f', 1);
  }
  html += QStringLiteral("</table>");
  return html;
}

}  // namespace pipestudio::viz
