#include "pipestudio/viz/ReportTable.hpp"

#include <QBrush>
#include <QColor>

namespace pipestudio::viz {

namespace {
bool isCell(const QAbstractItemModel* model, const QModelIndex& index) {
  return index.isValid() && index.model() == model && !index.parent().isValid() && index.row() < model->rowCount() &&
         index.column() < model->columnCount();
}
}  // namespace

ReportTableModel::ReportTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void ReportTableModel::setTable(ReportTable table) {
  beginResetModel();
  m_table = std::move(table);
  endResetModel();
}

int ReportTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_table.rows.size());
}

int ReportTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_table.headers.size());
}

QVariant ReportTableModel::data(const QModelIndex& index, int role) const {
  if (!isCell(this, index)) return {};
  const auto& row = m_table.rows[static_cast<std::size_t>(index.row())];
  if (static_cast<std::size_t>(index.column()) >= row.size()) return {};
  const ReportTable::Cell& cell = row[static_cast<std::size_t>(index.column())];
  switch (role) {
    case Qt::DisplayRole:
      return cell.text;
    case Qt::UserRole:
      return cell.sortValue.isValid() ? cell.sortValue : QVariant(cell.text);
    case Qt::ForegroundRole:
      if (cell.tone == ReportTable::Tone::Worse) return QBrush(QColor(0xd0, 0x3a, 0x3a));
      if (cell.tone == ReportTable::Tone::Better) return QBrush(QColor(0x2e, 0x9d, 0x4a));
      return {};
    case Qt::TextAlignmentRole:
      if (index.column() > 0) return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
      return {};
    default:
      return {};
  }
}

QVariant ReportTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || section < 0 || section >= m_table.headers.size()) return {};
  if (role == Qt::DisplayRole) return m_table.headers[section];
  if (role == Qt::ToolTipRole && !m_table.footnote.isEmpty()) return m_table.footnote;
  return {};
}

}  // namespace pipestudio::viz
