#include "pipestudio/viz/SpecModels.hpp"

#include <QBrush>
#include <QColor>
#include <QUndoCommand>
#include <cmath>
#include <set>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/model/Limits.hpp"
#include "pipestudio/plan/Costs.hpp"

namespace pipestudio::viz {

namespace {

/// A cell of this flat table (quietly false for the invalid indexes views and testers probe).
bool isCell(const QAbstractItemModel* model, const QModelIndex& index) {
  return index.isValid() && index.model() == model && !index.parent().isValid() && index.row() < model->rowCount() &&
         index.column() < model->columnCount();
}

/// One cell edit; redo/undo write the value through the model so views and dependents update.
class SetCellCommand : public QUndoCommand {
 public:
  SetCellCommand(SpecTableModel* model, int row, int column, QVariant before, QVariant after, const QString& text)
      : QUndoCommand(text),
        m_model(model),
        m_row(row),
        m_column(column),
        m_before(std::move(before)),
        m_after(std::move(after)) {}
  void redo() override { m_model->applyValue(m_row, m_column, m_after); }
  void undo() override { m_model->applyValue(m_row, m_column, m_before); }

 private:
  SpecTableModel* m_model;
  int m_row;
  int m_column;
  QVariant m_before;
  QVariant m_after;
};

bool isBlank(const QVariant& v) { return !v.isValid() || v.toString().trimmed().isEmpty(); }

/// A finite number within `range` (the loader's, model/Limits.hpp), or what is wrong.
std::optional<QString> checkNumber(const QVariant& v, limits::NumberRange range, const QString& unit, double* out) {
  const QString expected = QStringLiteral("%1 from %2 to %3").arg(unit).arg(range.min).arg(range.max);
  bool ok = false;
  const double x = v.toString().trimmed().toDouble(&ok);
  if (!ok || !std::isfinite(x)) return QStringLiteral("'%1' is not a number (expected %2)").arg(v.toString(), expected);
  if (!range.contains(x)) return QStringLiteral("%1 is out of range (expected %2)").arg(v.toString(), expected);
  if (out) *out = x;
  return std::nullopt;
}

/// A whole number within `range`, or what is wrong.
std::optional<QString> checkInteger(const QVariant& v, limits::IntegerRange range, const QString& unit) {
  double x = 0;
  const limits::NumberRange asNumber{static_cast<double>(range.min), static_cast<double>(range.max)};
  if (auto e = checkNumber(v, asNumber, unit, &x)) return e;
  if (x != std::floor(x))
    return QStringLiteral("%1 is not a whole number (expected %2 from %3 to %4)")
        .arg(x)
        .arg(unit)
        .arg(range.min)
        .arg(range.max);
  return std::nullopt;
}

std::optional<QString> checkBytes(const QVariant& v, std::int64_t* out) {
  const auto parsed = parseBytes(v.toString().trimmed().toStdString());
  if (!parsed) return QString::fromStdString(parsed.message()) + QStringLiteral(" (expected bytes, e.g. 512MiB)");
  if (!limits::kLayerBytes.contains(*parsed))
    return QStringLiteral("%1 is out of range (expected bytes from %2 to %3)")
        .arg(v.toString().trimmed())
        .arg(limits::kLayerBytes.min)
        .arg(limits::kLayerBytes.max);
  if (out) *out = *parsed;
  return std::nullopt;
}

bool hasShape(const Layer& layer) { return layer.transformer.has_value() || layer.flopsForward.has_value(); }

}  // namespace

// --- SpecTableModel -------------------------------------------------------------------------

SpecTableModel::SpecTableModel(QObject* parent) : QAbstractTableModel(parent) {}

int SpecTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(columnNames().size());
}

QVariant SpecTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole) return {};
  if (orientation == Qt::Vertical) return section + 1;
  const QStringList names = columnNames();
  return section >= 0 && section < names.size() ? QVariant(names[section]) : QVariant();
}

Qt::ItemFlags SpecTableModel::flags(const QModelIndex& index) const {
  if (!isCell(this, index)) return Qt::NoItemFlags;
  Qt::ItemFlags f = Qt::ItemIsSelectable | Qt::ItemIsEnabled;
  if (isEditable(index.row(), index.column())) {
    if (cellValue(index.row(), index.column()).typeId() == QMetaType::Bool)
      f |= Qt::ItemIsUserCheckable;
    else
      f |= Qt::ItemIsEditable;
  }
  return f;
}

QVariant SpecTableModel::data(const QModelIndex& index, int role) const {
  if (!isCell(this, index)) return {};
  const auto key = std::make_pair(index.row(), index.column());
  const auto rejected = m_rejectedText.find(key);
  const auto cellError = m_cellErrors.find(key);
  const auto crossError = m_errors.find(key);
  const QString error = cellError != m_cellErrors.end()
                            ? cellError->second
                            : (crossError != m_errors.end() ? crossError->second : QString());
  const QVariant value = cellValue(index.row(), index.column());
  const bool isBool = value.typeId() == QMetaType::Bool;
  switch (role) {
    case Qt::DisplayRole:
    case Qt::EditRole:
      if (rejected != m_rejectedText.end()) return rejected->second;
      if (isBool) return {};
      if (!value.isValid() && role == Qt::DisplayRole) return placeholder(index.row(), index.column());
      return role == Qt::DisplayRole ? displayValue(index.row(), index.column(), value) : value;
    case Qt::CheckStateRole:
      if (isBool) return value.toBool() ? Qt::Checked : Qt::Unchecked;
      return {};
    case Qt::ToolTipRole:
      if (!error.isEmpty()) return error;
      if (!value.isValid() && !placeholder(index.row(), index.column()).isEmpty())
        return QStringLiteral(
            "derived from the layer's shape by the cost model (first pipeline rank, the solver's "
            "parallelism); type a value to override");
      return {};
    case Qt::BackgroundRole:
      if (!error.isEmpty()) return QBrush(QColor(0xe5, 0x39, 0x35, 110));
      return {};
    case Qt::ForegroundRole:
      if (error.isEmpty() && !value.isValid()) return QBrush(QColor(0x80, 0x80, 0x80));
      return {};
    default:
      return {};
  }
}

bool SpecTableModel::setData(const QModelIndex& index, const QVariant& rawValue, int role) {
  if (!isCell(this, index)) return false;
  const int row = index.row();
  const int column = index.column();
  if (!isEditable(row, column)) return false;
  QVariant value = rawValue;
  if (role == Qt::CheckStateRole)
    value = rawValue.toInt() == Qt::Checked;
  else if (role != Qt::EditRole)
    return false;
  const auto key = std::make_pair(row, column);
  if (const auto error = validate(row, column, value)) {
    m_cellErrors[key] = *error;
    m_rejectedText[key] = value.toString();
    Q_EMIT dataChanged(index, index);
    return false;
  }
  const bool hadRejected = m_rejectedText.erase(key) > 0;
  m_cellErrors.erase(key);
  const QVariant before = cellValue(row, column);
  if (before == value || (isBlank(value) && !before.isValid())) {
    if (hadRejected) Q_EMIT dataChanged(index, index);
    return true;
  }
  const QVariant after = isBlank(value) && value.typeId() != QMetaType::Bool ? QVariant() : value;
  if (m_undo) {
    m_undo->push(new SetCellCommand(this, row, column, before, after,
                                    QStringLiteral("Edit %1").arg(columnNames().value(column))));
  } else {
    applyValue(row, column, after);
  }
  return true;
}

void SpecTableModel::applyValue(int row, int column, const QVariant& value) {
  store(row, column, value);
  const auto key = std::make_pair(row, column);
  m_cellErrors.erase(key);
  m_rejectedText.erase(key);
  resetErrors();
  crossValidate();
  Q_EMIT dataChanged(index(0, 0), index(std::max(0, rowCount() - 1), std::max(0, columnCount() - 1)));
  Q_EMIT specEdited();
}

std::optional<SpecTableModel::CellProblem> SpecTableModel::firstProblem() const {
  std::optional<CellProblem> best;
  auto consider = [&](const std::map<std::pair<int, int>, QString>& problems) {
    if (problems.empty()) return;
    const auto& [cell, message] = *problems.begin();  // maps are ordered by (row, column)
    if (!best || cell < std::make_pair(best->row, best->column)) best = CellProblem{cell.first, cell.second, message};
  };
  consider(m_cellErrors);
  consider(m_errors);
  return best;
}

void SpecTableModel::setCrossError(int row, int column, const QString& message) { m_errors[{row, column}] = message; }

void SpecTableModel::resetErrors() { m_errors.clear(); }

// --- LayerTableModel ------------------------------------------------------------------------

LayerTableModel::LayerTableModel(QObject* parent) : SpecTableModel(parent) {}

void LayerTableModel::setModelSpec(ModelSpec spec) {
  beginResetModel();
  m_spec = std::move(spec);
  m_rows.clear();
  for (std::size_t c = 0; c < m_spec.components.size(); ++c) {
    for (std::size_t l = 0; l < m_spec.components[c].layers.size(); ++l)
      m_rows.emplace_back(static_cast<int>(c), static_cast<int>(l));
  }
  resetErrors();
  m_costs.reset();
  endResetModel();
}

void LayerTableModel::setCostContext(ClusterSpec cluster, PlanConfig config, std::int64_t samplesPerMicrobatch) {
  m_costContext =
      CostContextArgs{std::move(cluster), std::move(config), std::max<std::int64_t>(1, samplesPerMicrobatch)};
  m_costs.reset();
  if (rowCount() > 0) Q_EMIT dataChanged(index(0, ForwardMs), index(rowCount() - 1, ColumnCount - 1));
}

const LayerCosts* LayerTableModel::derivedCosts(int row) const {
  if (!m_costContext || !inRange(m_rows, row)) return nullptr;
  const CostContextArgs& ctx = *m_costContext;
  if (ctx.cluster.gpu.peakTflops <= 0 || ctx.cluster.nodes.empty()) return nullptr;
  // The whole model is costed at once, with the resolved request's microbatch size (the spec
  // keeps the model's), and again after an edit.
  if (!m_costs) m_costs.emplace(m_spec, ctx.cluster, ctx.config, ctx.samplesPerMicrobatch);
  const auto [c, l] = m_rows[static_cast<std::size_t>(row)];
  return &m_costs->layer(c, l, 0);
}

int LayerTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}

QStringList LayerTableModel::columnNames() const {
  return {QStringLiteral("Component"),
          QStringLiteral("Layer"),
          QStringLiteral("Kind"),
          QStringLiteral("Forward (ms)"),
          QStringLiteral("Backward-input (ms)"),
          QStringLiteral("Backward-weight (ms)"),
          QStringLiteral("Activations"),
          QStringLiteral("Parameters"),
          QStringLiteral("Output")};
}

const Layer& LayerTableModel::layer(int row) const {
  const auto [c, l] = m_rows[static_cast<std::size_t>(row)];
  return m_spec.component(c).layers[static_cast<std::size_t>(l)];
}

Layer& LayerTableModel::layer(int row) {
  const auto [c, l] = m_rows[static_cast<std::size_t>(row)];
  return m_spec.component(c).layers[static_cast<std::size_t>(l)];
}

bool LayerTableModel::isEditable(int, int column) const { return column != Component; }

QVariant LayerTableModel::cellValue(int row, int column) const {
  const Layer& l = layer(row);
  auto optionalMs = [](const std::optional<double>& v) { return v ? QVariant(*v) : QVariant(); };
  auto optionalBytes = [](const std::optional<std::int64_t>& v) {
    return v ? QVariant(static_cast<qlonglong>(*v)) : QVariant();
  };
  switch (column) {
    case Component:
      return QString::fromStdString(m_spec.component(m_rows[static_cast<std::size_t>(row)].first).name);
    case Name:
      return QString::fromStdString(l.name);
    case Kind:
      return QString::fromStdString(l.kind);
    case ForwardMs:
      return optionalMs(l.forwardMs);
    case BackwardInputMs:
      return optionalMs(l.backwardInputMs);
    case BackwardWeightMs:
      return optionalMs(l.backwardWeightMs);
    case ActivationBytes:
      return optionalBytes(l.activationBytes);
    case ParameterBytes:
      return optionalBytes(l.parameterBytes);
    case OutputBytes:
      return optionalBytes(l.outputBytes);
    default:
      return {};
  }
}

QVariant LayerTableModel::displayValue(int, int column, const QVariant& raw) const {
  if (column >= ActivationBytes && raw.isValid()) return QString::fromStdString(formatBytes(raw.toDouble()));
  return raw;
}

QString LayerTableModel::placeholder(int row, int column) const {
  if (column < ForwardMs) return {};
  if (!hasShape(layer(row))) return QStringLiteral("0");
  const LayerCosts* costs = derivedCosts(row);
  if (!costs) return QStringLiteral("auto");
  auto msText = [](double v) { return QStringLiteral("auto · %1").arg(v, 0, 'g', 4); };
  auto bytesText = [](std::int64_t v) {
    return QStringLiteral("auto · %1").arg(QString::fromStdString(formatBytes(static_cast<double>(v))));
  };
  switch (column) {
    case ForwardMs:
      return msText(costs->forwardMs);
    case BackwardInputMs:
      return msText(costs->backwardInputMs);
    case BackwardWeightMs:
      return msText(costs->backwardWeightMs);
    case ActivationBytes:
      return bytesText(costs->activationBytes);
    case ParameterBytes:
      return bytesText(costs->parameterBytes);
    case OutputBytes:
      return bytesText(costs->outputBytes);
    default:
      return QStringLiteral("auto");
  }
}

std::optional<QString> LayerTableModel::validate(int row, int column, const QVariant& value) const {
  const Layer& l = layer(row);
  const int component = m_rows[static_cast<std::size_t>(row)].first;
  const pipestudio::Component& comp = m_spec.component(component);
  switch (column) {
    case Name: {
      const QString name = value.toString().trimmed();
      if (name.isEmpty()) return QStringLiteral("a layer needs a name");
      for (std::size_t i = 0; i < comp.layers.size(); ++i) {
        if (&comp.layers[i] != &l && QString::fromStdString(comp.layers[i].name) == name)
          return QStringLiteral("'%1' is already a layer of %2 (expected a unique name)")
              .arg(name, QString::fromStdString(comp.name));
      }
      return std::nullopt;
    }
    case Kind:
      if (value.toString().trimmed().isEmpty())
        return QStringLiteral("a layer needs a kind (transformer, embedding, lm_head, conv, attention, generic)");
      return std::nullopt;
    case ForwardMs:
    case BackwardInputMs:
    case BackwardWeightMs: {
      if (isBlank(value)) return std::nullopt;  // back to the shape-derived (or zero) cost
      double ms = 0;
      if (auto e = checkNumber(value, limits::kLayerMs, QStringLiteral("milliseconds"), &ms)) return e;
      // As the loader (ModelIO.cpp readLayer): a layer's times are measured or derived from its
      // shape, never half and half.
      if (l.transformer || l.flopsForward)
        return QStringLiteral(
                   "the layer's times come from its %1 (expected measured costs or a shape, not both: "
                   "clear the shape in the model file to enter measured times)")
            .arg(l.transformer ? QStringLiteral("transformer shape") : QStringLiteral("FLOPs"));
      if (column != ForwardMs && !comp.trainable && ms > 0)
        return QStringLiteral("component %1 is frozen: it has no backward (expected 0)")
            .arg(QString::fromStdString(comp.name));
      return std::nullopt;
    }
    case ActivationBytes:
    case ParameterBytes:
    case OutputBytes:
      if (isBlank(value)) return std::nullopt;
      if (auto e = checkBytes(value, nullptr)) return e;
      if (l.transformer)
        return QStringLiteral(
            "the layer's sizes come from its transformer shape (expected measured costs or a "
            "shape, not both)");
      return std::nullopt;
    default:
      return QStringLiteral("read-only");
  }
}

void LayerTableModel::store(int row, int column, const QVariant& value) {
  m_costs.reset();
  Layer& l = layer(row);
  auto ms = [&](std::optional<double>& field) {
    if (isBlank(value))
      field.reset();
    else
      field = value.toString().trimmed().toDouble();
  };
  auto bytes = [&](std::optional<std::int64_t>& field) {
    std::int64_t b = 0;
    if (isBlank(value) || checkBytes(value, &b))
      field.reset();
    else
      field = b;
  };
  switch (column) {
    case Name:
      l.name = value.toString().trimmed().toStdString();
      break;
    case Kind:
      l.kind = value.toString().trimmed().toStdString();
      break;
    case ForwardMs:
      ms(l.forwardMs);
      break;
    case BackwardInputMs:
      ms(l.backwardInputMs);
      break;
    case BackwardWeightMs:
      ms(l.backwardWeightMs);
      break;
    case ActivationBytes:
      bytes(l.activationBytes);
      break;
    case ParameterBytes:
      bytes(l.parameterBytes);
      break;
    case OutputBytes:
      bytes(l.outputBytes);
      break;
    default:
      break;
  }
}

// --- ComponentTableModel --------------------------------------------------------------------

ComponentTableModel::ComponentTableModel(QObject* parent) : SpecTableModel(parent) {}

void ComponentTableModel::setModelSpec(ModelSpec spec) {
  beginResetModel();
  m_spec = std::move(spec);
  resetErrors();
  crossValidate();
  endResetModel();
}

int ComponentTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_spec.components.size());
}

QStringList ComponentTableModel::columnNames() const {
  return {QStringLiteral("Component"), QStringLiteral("Trainable"), QStringLiteral("Feeds"), QStringLiteral("Layers")};
}

bool ComponentTableModel::isEditable(int, int column) const { return column != Layers; }

QVariant ComponentTableModel::cellValue(int row, int column) const {
  const Component& c = m_spec.component(row);
  switch (column) {
    case Name:
      return QString::fromStdString(c.name);
    case Trainable:
      return c.trainable;
    case Feeds: {
      QStringList feeds;
      for (const auto& f : c.feeds) feeds << QString::fromStdString(f);
      return feeds.join(QStringLiteral(", "));
    }
    case Layers:
      return static_cast<int>(c.layers.size());
    default:
      return {};
  }
}

std::optional<QString> ComponentTableModel::validate(int row, int column, const QVariant& value) const {
  const auto self = static_cast<std::size_t>(row);
  switch (column) {
    case Name: {
      const QString name = value.toString().trimmed();
      if (name.isEmpty()) return QStringLiteral("a component needs a name");
      for (std::size_t i = 0; i < m_spec.components.size(); ++i) {
        if (i != self && QString::fromStdString(m_spec.components[i].name) == name)
          return QStringLiteral("'%1' names another component already (expected a unique name)").arg(name);
      }
      return std::nullopt;
    }
    case Trainable:
      return std::nullopt;
    case Feeds: {
      const QStringList names = value.toString().split(QLatin1Char(','), Qt::SkipEmptyParts);
      for (const QString& raw : names) {
        const QString name = raw.trimmed();
        if (name == QString::fromStdString(m_spec.components[self].name))
          return QStringLiteral("a component cannot feed itself");
        if (m_spec.componentIndex(name.toStdString()) < 0)
          return QStringLiteral("'%1' is not a component of this model (expected one of its component names)")
              .arg(name);
      }
      return std::nullopt;
    }
    default:
      return QStringLiteral("read-only");
  }
}

void ComponentTableModel::store(int row, int column, const QVariant& value) {
  Component& c = m_spec.component(row);
  switch (column) {
    case Name: {
      const std::string before = c.name;
      c.name = value.toString().trimmed().toStdString();
      for (Component& other : m_spec.components) {  // keep feeds pointing at the renamed component
        for (std::string& f : other.feeds) {
          if (f == before) f = c.name;
        }
      }
      break;
    }
    case Trainable:
      c.trainable = value.toBool();
      break;
    case Feeds: {
      c.feeds.clear();
      for (const QString& raw : value.toString().split(QLatin1Char(','), Qt::SkipEmptyParts)) {
        if (!raw.trimmed().isEmpty()) c.feeds.push_back(raw.trimmed().toStdString());
      }
      break;
    }
    default:
      break;
  }
}

void ComponentTableModel::crossValidate() {
  std::set<std::string> seen;
  for (std::size_t i = 0; i < m_spec.components.size(); ++i) {
    const Component& c = m_spec.components[i];
    const int row = static_cast<int>(i);
    if (!seen.insert(c.name).second)
      setCrossError(
          row, Name,
          QStringLiteral("'%1' appears twice (expected unique component names)").arg(QString::fromStdString(c.name)));
    for (const std::string& f : c.feeds) {
      if (m_spec.componentIndex(f) < 0)
        setCrossError(row, Feeds,
                      QStringLiteral("'%1' is not a component of this model").arg(QString::fromStdString(f)));
    }
    if (c.layers.empty()) setCrossError(row, Layers, QStringLiteral("a component needs at least one layer"));
  }
}

// --- ClusterTableModel ----------------------------------------------------------------------

ClusterTableModel::ClusterTableModel(QObject* parent) : SpecTableModel(parent) {}

void ClusterTableModel::setClusterSpec(ClusterSpec spec) {
  beginResetModel();
  m_spec = std::move(spec);
  resetErrors();
  endResetModel();
}

int ClusterTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_spec.nodes.size()) + 2;
}

QStringList ClusterTableModel::columnNames() const {
  return {QStringLiteral("Host / link"),      QStringLiteral("GPUs"),         QStringLiteral("GPU"),
          QStringLiteral("Peak TFLOPs"),      QStringLiteral("Memory (GiB)"), QStringLiteral("Efficiency"),
          QStringLiteral("Bandwidth (GB/s)"), QStringLiteral("Latency (µs)")};
}

bool ClusterTableModel::isEditable(int row, int column) const {
  if (isLinkRow(row)) return column == BandwidthGBps || column == LatencyUs;
  return column <= Efficiency;
}

QVariant ClusterTableModel::cellValue(int row, int column) const {
  if (isLinkRow(row)) {
    const bool intra = row == static_cast<int>(m_spec.nodes.size());
    const LinkSpec& link = intra ? m_spec.intraNode : m_spec.interNode;
    switch (column) {
      case Host:
        return intra ? QStringLiteral("intra-node link") : QStringLiteral("inter-node link");
      case BandwidthGBps:
        return link.bandwidthGBps;
      case LatencyUs:
        return link.latencyUs;
      default:
        return QString();
    }
  }
  const NodeSpec& node = m_spec.node(row);
  const GpuSpec& gpu = node.gpu ? *node.gpu : m_spec.gpu;
  switch (column) {
    case Host:
      return QString::fromStdString(node.host);
    case Gpus:
      return node.gpus;
    case GpuName:
      return QString::fromStdString(gpu.name);
    case PeakTflops:
      return gpu.peakTflops;
    case MemoryGib:
      return gpu.memoryGib;
    case Efficiency:
      return gpu.efficiency;
    default:
      return QString();
  }
}

std::optional<QString> ClusterTableModel::validate(int row, int column, const QVariant& value) const {
  if (!isEditable(row, column)) return QStringLiteral("read-only");
  switch (column) {
    case Host:
      if (value.toString().trimmed().isEmpty()) return QStringLiteral("a node needs a host name");
      return std::nullopt;
    case Gpus:
      return checkInteger(value, limits::kGpusPerNode, QStringLiteral("GPUs"));
    case GpuName:
      if (value.toString().trimmed().isEmpty()) return QStringLiteral("the GPU needs a name");
      return std::nullopt;
    case PeakTflops:
      return checkNumber(value, limits::kPeakTflops, QStringLiteral("TFLOP/s"), nullptr);
    case MemoryGib:
      return checkNumber(value, limits::kMemoryGib, QStringLiteral("GiB"), nullptr);
    case Efficiency:
      return checkNumber(value, limits::kEfficiency, QStringLiteral("a fraction of peak"), nullptr);
    case BandwidthGBps:
      return checkNumber(value, limits::kLinkBandwidthGBps, QStringLiteral("GB/s"), nullptr);
    case LatencyUs:
      return checkNumber(value, limits::kLinkLatencyUs, QStringLiteral("microseconds"), nullptr);
    default:
      return QStringLiteral("read-only");
  }
}

void ClusterTableModel::store(int row, int column, const QVariant& value) {
  const double number = value.toString().trimmed().toDouble();
  if (isLinkRow(row)) {
    LinkSpec& link = row == static_cast<int>(m_spec.nodes.size()) ? m_spec.intraNode : m_spec.interNode;
    if (column == BandwidthGBps) link.bandwidthGBps = number;
    if (column == LatencyUs) link.latencyUs = number;
    return;
  }
  NodeSpec& node = m_spec.nodes[static_cast<std::size_t>(row)];
  // A node without its own GPU type edits the cluster's default GPU (homogeneous clusters).
  GpuSpec& gpu = node.gpu ? *node.gpu : m_spec.gpu;
  switch (column) {
    case Host:
      node.host = value.toString().trimmed().toStdString();
      break;
    case Gpus:
      node.gpus = static_cast<int>(number);
      break;
    case GpuName:
      gpu.name = value.toString().trimmed().toStdString();
      break;
    case PeakTflops:
      gpu.peakTflops = number;
      break;
    case MemoryGib:
      gpu.memoryGib = number;
      break;
    case Efficiency:
      gpu.efficiency = number;
      break;
    default:
      break;
  }
}

}  // namespace pipestudio::viz
