#pragma once
/// \file A table of text cells with a tone (better / worse) per cell, and its model: what the
/// compare view shows of a measured run against its plan (per device, per op kind, drift), so
/// those tables need no model class of their own.

#include <QAbstractTableModel>
#include <QStringList>
#include <QVariant>
#include <vector>

namespace pipestudio::viz {

struct ReportTable {
  enum class Tone : std::int8_t { Worse = -1, Neutral = 0, Better = 1 };
  struct Cell {
    QString text;
    QVariant sortValue;  ///< the raw number (Qt::UserRole); the text when unset
    Tone tone = Tone::Neutral;
  };
  QString title;  ///< the tab's name
  QStringList headers;
  std::vector<std::vector<Cell>> rows;
  QString footnote;  ///< shown as the header's tooltip (units, what "per iteration" means)
};

class ReportTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  explicit ReportTableModel(QObject* parent = nullptr);
  void setTable(ReportTable table);
  const ReportTable& table() const { return m_table; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  ReportTable m_table;
};

}  // namespace pipestudio::viz
