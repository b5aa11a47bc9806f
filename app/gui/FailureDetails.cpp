#include "FailureDetails.hpp"

#include <QDialog>
#include <QDialogButtonBox>
#include <QHeaderView>
#include <QLabel>
#include <QTableWidget>
#include <QTextBrowser>
#include <QVBoxLayout>

#include "SolveDiagnosis.hpp"
#include "pipestudio/common/Units.hpp"

namespace pipestudio::gui {

namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }
QString bytes(std::int64_t b) { return q(formatBytes(static_cast<double>(b))); }

QTableWidget* overageTable(const MemoryDiagnosis& d, QWidget* parent) {
  // The fixed columns, then one per allocated part of the breakdown (memoryParts), then the margin.
  QStringList columns{QStringLiteral("GPU"), QStringLiteral("needed"), QStringLiteral("capacity"),
                      QStringLiteral("over by"), QStringLiteral("largest part")};
  for (const MemoryPart& part : memoryParts()) {
    if (!part.keptBack) columns << QString::fromLatin1(part.shortName.data(), static_cast<int>(part.shortName.size()));
  }
  columns << QStringLiteral("margin");
  auto* table = new QTableWidget(static_cast<int>(d.devices.size()), static_cast<int>(columns.size()), parent);
  table->setObjectName(QStringLiteral("FailureTable"));
  table->setHorizontalHeaderLabels(columns);
  table->verticalHeader()->setVisible(false);
  table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  for (std::size_t r = 0; r < d.devices.size(); ++r) {
    const DeviceOverage& o = d.devices[r];
    QStringList cells{QString::number(o.device), bytes(o.neededBytes), bytes(o.capacityBytes),
                      o.overBytes() > 0 ? bytes(o.overBytes()) : QStringLiteral("fits"), q(o.largestPart)};
    for (const MemoryPart& part : memoryParts()) {
      if (!part.keptBack) cells << bytes(o.memory.*part.bytes);
    }
    cells << bytes(d.explicitLimit ? 0 : o.memory.marginBytes());
    for (int c = 0; c < static_cast<int>(columns.size()); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      if (c == 3 && o.overBytes() > 0) item->setForeground(QColor(0xd0, 0x3a, 0x3a));
      table->setItem(static_cast<int>(r), c, item);
    }
  }
  table->resizeColumnsToContents();
  return table;
}

QString hintText(const MemoryDiagnosis& d) {
  if (d.smallestFittingDevices) {
    return QStringLiteral("The smallest pipeline that fits: <b>Devices %1</b> (busiest GPU %2).")
        .arg(*d.smallestFittingDevices)
        .arg(bytes(d.fittingPeakBytes));
  }
  if (d.largestTriedDevices > 0) {
    return QStringLiteral(
               "No pipeline up to Devices %1 fits at these degrees: try TP, Recompute, ZeRO or a schedule "
               "with less activation memory (v-half, v-min).")
        .arg(d.largestTriedDevices);
  }
  return QStringLiteral(
      "The cluster has no GPUs for a deeper pipeline at these degrees: try TP, Recompute, ZeRO "
      "or a schedule with less activation memory (v-half, v-min).");
}

}  // namespace

QDialog* showFailureDetails(QWidget* parent, const QString& failure, const MemoryDiagnosis* diagnosis) {
  auto* dialog = new QDialog(parent);
  dialog->setObjectName(QStringLiteral("FailureDetails"));
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  dialog->setWindowTitle(QStringLiteral("Why the solve failed"));
  auto* layout = new QVBoxLayout(dialog);
  auto* text = new QTextBrowser(dialog);
  text->setObjectName(QStringLiteral("FailureText"));
  text->setPlainText(failure);
  layout->addWidget(text, 1);
  if (diagnosis) {
    const MemoryDiagnosis& d = *diagnosis;
    auto* heading = new QLabel(QStringLiteral("<b>%1 per device at its peak</b> against %2 (margin: CUDA context, "
                                              "workspaces and fragmentation kept back by each GPU)")
                                   .arg(q(d.schedule), d.explicitLimit ? QStringLiteral("the Memory limit")
                                                                       : QStringLiteral("the GPU's memory")),
                               dialog);
    heading->setWordWrap(true);
    layout->addWidget(heading);
    layout->addWidget(overageTable(d, dialog), 2);
    auto* hint = new QLabel(hintText(d), dialog);
    hint->setObjectName(QStringLiteral("FailureHint"));
    hint->setWordWrap(true);
    layout->addWidget(hint);
  }
  auto* box = new QDialogButtonBox(QDialogButtonBox::Close, dialog);
  QObject::connect(box, &QDialogButtonBox::rejected, dialog, &QDialog::close);
  layout->addWidget(box);
  dialog->resize(760, diagnosis ? 520 : 320);
  dialog->show();
  return dialog;
}

}  // namespace pipestudio::gui
