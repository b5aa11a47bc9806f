#include "pipestudio/viz/MemoryBreakdownView.hpp"

#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>

#include "pipestudio/common/Units.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/viz/MetricsModel.hpp"

namespace pipestudio::viz {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// One hue per part, apart for the common colour-vision deficiencies (Tableau 10), the two
// kept-back parts in greys.
constexpr std::array<unsigned, MemoryBreakdownView::kParts> kColours{0x4e79a7, 0xf28e2b, 0xe15759, 0x76b7b2,
                                                                     0x59a14f, 0xedc948, 0xb07aa1, 0xff9da7,
                                                                     0x9c755f, 0x86bcb6, 0xbab0ac, 0x79706e};

QString q(const std::string& s) { return QString::fromStdString(s); }

QString axisLabel(bool anyDevice, bool dimmed) {
  if (!anyDevice) return QStringLiteral("no plan");
  return dimmed ? QStringLiteral("GPU (pipeline rank) · last good plan, not of the current settings")
                : QStringLiteral("GPU (pipeline rank)");
}

}  // namespace

const std::array<const char*, MemoryBreakdownView::kParts>& MemoryBreakdownView::partNames() {
  static const std::array<const char*, kParts> names = [] {
    std::array<const char*, kParts> out{};
    for (int i = 0; i < kParts; ++i)
      out[static_cast<std::size_t>(i)] = memoryParts()[static_cast<std::size_t>(i)].name.data();
    return out;
  }();
  return names;
}

std::array<double, MemoryBreakdownView::kParts> MemoryBreakdownView::partsOf(const DeviceMetrics& d) {
  std::array<double, kParts> out{};
  for (int i = 0; i < kParts; ++i) {
    out[static_cast<std::size_t>(i)] = static_cast<double>(d.memory.*memoryParts()[static_cast<std::size_t>(i)].bytes);
  }
  return out;
}

MemoryBreakdownView::MemoryBreakdownView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  m_plot = new QCustomPlot(this);
  m_plot->setObjectName(QStringLiteral("MemoryBreakdownPlot"));
  m_plot->setMouseTracking(true);
  // An explicit minimum: the plot's own hint (axis and legend text) would widen its dock.
  m_plot->setMinimumSize(120, 140);
  layout->addWidget(m_plot);
  const QPalette pal = palette();
  m_plot->setBackground(pal.color(QPalette::Base));
  m_plot->axisRect()->setBackground(pal.color(QPalette::Base));
  for (QCPAxis* axis : m_plot->axisRect()->axes()) {
    axis->setBasePen(QPen(pal.color(QPalette::WindowText)));
    axis->setTickPen(QPen(pal.color(QPalette::WindowText)));
    axis->setTickLabelColor(pal.color(QPalette::WindowText));
    axis->setLabelColor(pal.color(QPalette::WindowText));
  }
  m_plot->yAxis->setLabel(QStringLiteral("GiB per GPU"));
  QCPBars* below = nullptr;
  for (int i = 0; i < kParts; ++i) {
    auto* bars = new QCPBars(m_plot->xAxis, m_plot->yAxis);
    // Short names in the legend (the dock is narrow); the tooltip spells them out.
    const std::string_view shortName = memoryParts()[static_cast<std::size_t>(i)].shortName;
    bars->setName(QString::fromLatin1(shortName.data(), static_cast<int>(shortName.size())));
    const QColor colour = QColor::fromRgb(kColours[static_cast<std::size_t>(i)]);
    bars->setBrush(colour);
    bars->setPen(QPen(colour.darker(130)));
    bars->setWidthType(QCPBars::wtPlotCoords);
    bars->setWidth(0.7);
    if (below) bars->moveAbove(below);
    below = bars;
    m_bars[static_cast<std::size_t>(i)] = bars;
  }
  m_capacity = new QCPItemStraightLine(m_plot);
  m_capacity->setPen(QPen(QColor(0xd0, 0x10, 0x30), 1.5, Qt::DashLine));
  m_capacity->setVisible(false);
  // The legend above the bars (rows of three), never over them.
  QCPLegend* legend = m_plot->legend;
  legend->setVisible(true);
  legend->setFont(font());
  legend->setIconSize(10, 10);
  legend->setWrap(3);
  legend->setFillOrder(QCPLegend::foColumnsFirst, true);  // rearranges the entries added above
  legend->setBorderPen(Qt::NoPen);
  legend->setBrush(Qt::NoBrush);
  legend->setTextColor(pal.color(QPalette::WindowText));
  m_plot->axisRect()->insetLayout()->take(legend);
  m_plot->plotLayout()->insertRow(0);
  m_plot->plotLayout()->addElement(0, 0, legend);
  m_plot->plotLayout()->setRowStretchFactor(0, 0.001);
  connect(m_plot, &QCustomPlot::mouseMove, this, &MemoryBreakdownView::onHover);
  setPlan(nullptr);
}

void MemoryBreakdownView::setDimmed(bool dimmed) {
  if (dimmed == m_dimmed) return;
  m_dimmed = dimmed;
  for (int i = 0; i < kParts; ++i) {
    QColor colour = QColor::fromRgb(kColours[static_cast<std::size_t>(i)]);
    if (dimmed) colour.setAlpha(70);
    m_bars[static_cast<std::size_t>(i)]->setBrush(colour);
  }
  m_plot->xAxis->setLabel(axisLabel(!m_devices.empty(), dimmed));
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void MemoryBreakdownView::setPlan(const std::shared_ptr<const Plan>& plan) {
  m_devices.clear();
  m_capacityBytes = 0;
  if (plan) {
    m_devices = metricsOf(*plan).devices;
    if (plan->config.memoryLimitBytes)
      m_capacityBytes = *plan->config.memoryLimitBytes;
    else if (plan->cluster.gpu.memoryGib > 0)
      m_capacityBytes = deviceGpu(plan->cluster, plan->config, 0).memoryBytes();
  }
  const auto n = static_cast<int>(m_devices.size());
  double top = 0;
  for (int i = 0; i < kParts; ++i) {
    QVector<double> keys;
    QVector<double> values;
    for (int d = 0; d < n; ++d) {
      keys.push_back(d);
      values.push_back(partsOf(m_devices[static_cast<std::size_t>(d)])[static_cast<std::size_t>(i)] / kGiB);
    }
    m_bars[static_cast<std::size_t>(i)]->setData(keys, values, true);
  }
  // The legend names only the parts this plan has (a pure pipeline has no userbuffers), in
  // stacking order.
  QCPLegend* legend = m_plot->legend;
  legend->clearItems();
  for (int i = 0; i < kParts; ++i) {
    const bool present = std::any_of(m_devices.begin(), m_devices.end(), [&](const DeviceMetrics& d) {
      return partsOf(d)[static_cast<std::size_t>(i)] > 0;
    });
    if (present || m_devices.empty()) m_bars[static_cast<std::size_t>(i)]->addToLegend();
  }
  // An item is exactly one line high and clips to itself: the descenders of "grads" were cut
  // ("qrads"). Room below the text keeps them.
  // (A wrapped grid counts its empty cells as items too: item() is null there.)
  for (int i = 0; i < legend->itemCount(); ++i) {
    if (QCPAbstractLegendItem* item = legend->item(i)) item->setMargins(QMargins(0, 1, 0, 3));
  }
  for (const DeviceMetrics& d : m_devices) {
    double total = 0;
    for (double part : partsOf(d)) total += part;
    top = std::max(top, total / kGiB);
  }
  const double capacityGiB = static_cast<double>(m_capacityBytes) / kGiB;
  m_capacity->setVisible(m_capacityBytes > 0 && n > 0);
  m_capacity->point1->setCoords(-1, capacityGiB);
  m_capacity->point2->setCoords(n + 1, capacityGiB);
  auto ticker = QSharedPointer<QCPAxisTickerText>::create();
  const int step = n <= 8 ? 1 : (n <= 16 ? 2 : (n <= 32 ? 4 : (n <= 64 ? 8 : 16)));
  for (int d = 0; d < n; d += step) ticker->addTick(d, QString::number(d));
  m_plot->xAxis->setTicker(ticker);
  m_plot->xAxis->setLabel(axisLabel(n > 0, m_dimmed));
  m_plot->xAxis->setRange(-0.6, std::max(1, n) - 0.4);
  m_plot->yAxis->setRange(0, std::max({top, capacityGiB, 1e-3}) * 1.06);
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

QString MemoryBreakdownView::describe(int device) const {
  if (device < 0 || device >= deviceCount()) return {};
  const DeviceMetrics& d = m_devices[static_cast<std::size_t>(device)];
  const auto parts = partsOf(d);
  double total = 0;
  QString text = QStringLiteral("GPU %1 at its peak:").arg(device);
  for (int i = 0; i < kParts; ++i) {
    total += parts[static_cast<std::size_t>(i)];
    if (parts[static_cast<std::size_t>(i)] <= 0) continue;
    text += QStringLiteral("\n  %1: %2")
                .arg(QString::fromLatin1(partNames()[static_cast<std::size_t>(i)]),
                     q(formatBytes(parts[static_cast<std::size_t>(i)])));
  }
  text += QStringLiteral("\n  total %1").arg(q(formatBytes(total)));
  if (m_capacityBytes > 0) {
    const double free = static_cast<double>(m_capacityBytes) - total;
    text += free >= 0 ? QStringLiteral(" of %1 (%2 free)")
                            .arg(q(formatBytes(static_cast<double>(m_capacityBytes))), q(formatBytes(free)))
                      : QStringLiteral(" of %1: over by %2")
                            .arg(q(formatBytes(static_cast<double>(m_capacityBytes))), q(formatBytes(-free)));
  }
  return text;
}

void MemoryBreakdownView::onHover(QMouseEvent* event) {
  const int device = static_cast<int>(std::lround(m_plot->xAxis->pixelToCoord(event->position().x())));
  const QString text = m_plot->axisRect()->rect().contains(event->pos()) ? describe(device) : QString();
  if (text.isEmpty())
    QToolTip::hideText();
  else
    QToolTip::showText(event->globalPosition().toPoint() + QPoint(12, 12), text, m_plot);
}

}  // namespace pipestudio::viz
