#pragma once
/// \file Editable table models over the model and cluster descriptions. Every edit goes through
/// a QUndoStack (undo/redo); a value that does not validate is kept in its cell, shown in red
/// with the reason as tooltip, and never reaches the spec.

#include <QAbstractTableModel>
#include <QUndoStack>
#include <map>
#include <optional>
#include <utility>

#include "pipestudio/model/Cluster.hpp"
#include "pipestudio/model/Model.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio::viz {

/// Shared machinery: undoable cell edits, in-place validation messages.
class SpecTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  explicit SpecTableModel(QObject* parent = nullptr);
  /// Edits are pushed here (nullptr: applied directly, not undoable).
  void setUndoStack(QUndoStack* stack) { m_undo = stack; }
  QUndoStack* undoStack() const { return m_undo; }

  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
  int columnCount(const QModelIndex& parent = {}) const override;

  /// Problems of the current content, (row, column) → message (also flagged on load).
  const std::map<std::pair<int, int>, QString>& errors() const { return m_errors; }
  bool hasErrors() const { return !m_errors.empty(); }
  /// A cell that blocks solving: a rejected edit (still shown in red) or a cross-row problem.
  struct CellProblem {
    int row = 0;
    int column = 0;
    QString message;
  };
  /// The first such cell in table order, or nullopt.
  std::optional<CellProblem> firstProblem() const;
  /// Applies a value without validation or undo (used by the undo command).
  void applyValue(int row, int column, const QVariant& value);

 Q_SIGNALS:
  /// The spec changed (edit, undo or redo): dependents re-solve.
  void specEdited();

 protected:
  virtual QStringList columnNames() const = 0;
  virtual bool isEditable(int row, int column) const = 0;
  virtual QVariant cellValue(int row, int column) const = 0;
  /// Text shown when the cell holds no explicit value (e.g. a cost derived from the shape).
  virtual QString placeholder(int, int) const { return {}; }
  /// How a stored value reads in the table (EditRole keeps the raw value).
  virtual QVariant displayValue(int, int, const QVariant& raw) const { return raw; }
  /// nullopt when `value` is acceptable, otherwise what is wrong and what is expected.
  virtual std::optional<QString> validate(int row, int column, const QVariant& value) const = 0;
  virtual void store(int row, int column, const QVariant& value) = 0;
  /// Whole-content checks that can only be made across rows (unique names, feeds targets).
  virtual void crossValidate() {}
  void setCrossError(int row, int column, const QString& message);
  void resetErrors();

 private:
  QUndoStack* m_undo = nullptr;
  std::map<std::pair<int, int>, QString> m_errors;        ///< cross-row problems
  std::map<std::pair<int, int>, QString> m_cellErrors;    ///< rejected edits
  std::map<std::pair<int, int>, QString> m_rejectedText;  ///< what the user typed
};

/// Layers of every component, one row each: costs in ms and bytes as measured or "auto" from
/// the layer's shape.
class LayerTableModel : public SpecTableModel {
  Q_OBJECT
 public:
  enum Column {
    Component,
    Name,
    Kind,
    ForwardMs,
    BackwardInputMs,
    BackwardWeightMs,
    ActivationBytes,
    ParameterBytes,
    OutputBytes,
    ColumnCount
  };
  explicit LayerTableModel(QObject* parent = nullptr);
  void setModelSpec(ModelSpec spec);
  /// Where shape-derived ("auto") cells get the value they show in grey: the layer's costs on
  /// the first pipeline rank under `config`'s parallelism, for microbatches of
  /// `samplesPerMicrobatch` samples (the resolved request's; core/plan costContext).
  void setCostContext(ClusterSpec cluster, PlanConfig config, std::int64_t samplesPerMicrobatch);
  const ModelSpec& modelSpec() const { return m_spec; }
  int rowCount(const QModelIndex& parent = {}) const override;
  std::pair<int, int> layerOfRow(int row) const { return m_rows[static_cast<std::size_t>(row)]; }

 protected:
  QStringList columnNames() const override;
  bool isEditable(int row, int column) const override;
  QVariant cellValue(int row, int column) const override;
  QString placeholder(int row, int column) const override;
  QVariant displayValue(int row, int column, const QVariant& raw) const override;
  std::optional<QString> validate(int row, int column, const QVariant& value) const override;
  void store(int row, int column, const QVariant& value) override;

 private:
  const Layer& layer(int row) const;
  Layer& layer(int row);
  const LayerCosts* derivedCosts(int row) const;
  ModelSpec m_spec;
  std::vector<std::pair<int, int>> m_rows;  // (component, layer)
  struct CostContextArgs {
    ClusterSpec cluster;
    PlanConfig config;
    std::int64_t samplesPerMicrobatch = 1;
  };
  std::optional<CostContextArgs> m_costContext;
  mutable std::optional<CostedModel> m_costs;  ///< derived on demand, dropped on every change
};

/// Components: name, trainable, feeds (comma-separated names), layer count.
class ComponentTableModel : public SpecTableModel {
  Q_OBJECT
 public:
  enum Column { Name, Trainable, Feeds, Layers, ColumnCount };
  explicit ComponentTableModel(QObject* parent = nullptr);
  void setModelSpec(ModelSpec spec);
  const ModelSpec& modelSpec() const { return m_spec; }
  int rowCount(const QModelIndex& parent = {}) const override;

 protected:
  QStringList columnNames() const override;
  bool isEditable(int row, int column) const override;
  QVariant cellValue(int row, int column) const override;
  std::optional<QString> validate(int row, int column, const QVariant& value) const override;
  void store(int row, int column, const QVariant& value) override;
  void crossValidate() override;

 private:
  ModelSpec m_spec;
};

/// Cluster: one row per node (host, GPUs, GPU type and its figures), then one row per link
/// class (intra-node, inter-node) with bandwidth and latency.
class ClusterTableModel : public SpecTableModel {
  Q_OBJECT
 public:
  enum Column { Host, Gpus, GpuName, PeakTflops, MemoryGib, Efficiency, BandwidthGBps, LatencyUs, ColumnCount };
  explicit ClusterTableModel(QObject* parent = nullptr);
  void setClusterSpec(ClusterSpec spec);
  const ClusterSpec& clusterSpec() const { return m_spec; }
  int rowCount(const QModelIndex& parent = {}) const override;
  /// Rows: nodes first, then "intra-node" and "inter-node" link rows.
  bool isLinkRow(int row) const { return row >= static_cast<int>(m_spec.nodes.size()); }

 protected:
  QStringList columnNames() const override;
  bool isEditable(int row, int column) const override;
  QVariant cellValue(int row, int column) const override;
  std::optional<QString> validate(int row, int column, const QVariant& value) const override;
  void store(int row, int column, const QVariant& value) override;

 private:
  ClusterSpec m_spec;
};

}  // namespace pipestudio::viz
