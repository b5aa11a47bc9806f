#include "ConfigureDock.hpp"

#include <QBrush>
#include <QColor>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <limits>
#include <optional>

#include "GuiText.hpp"
#include "WheelGuard.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/viz/MetricsModel.hpp"

namespace pipestudio::gui {

namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }

bool isCell(const QAbstractItemModel* model, const QModelIndex& index) {
  return index.isValid() && index.model() == model && !index.parent().isValid() && index.row() < model->rowCount() &&
         index.column() < model->columnCount();
}

/// "1, 2, 4" → {1, 2, 4}; nullopt when a part is not a positive whole number.
std::optional<std::vector<int>> parseIntList(const QString& text) {
  std::vector<int> out;
  for (const QString& part : text.split(QRegularExpression(QStringLiteral("[,\\s]+")), Qt::SkipEmptyParts)) {
    bool ok = false;
    const int v = part.toInt(&ok);
    if (!ok || v < 1) return std::nullopt;
    out.push_back(v);
  }
  return out;
}

/// A headroom below this share of the GPU is shown as tight (red).
constexpr double kTightHeadroom = 0.05;

}  // namespace

QString configurationText(const PlanConfig& c) {
  const Parallelism& par = c.parallel;
  QStringList parts{q(c.schedule), viz::layoutWithExpertsText(c)};
  QString batch = QStringLiteral("%1 microbatches").arg(c.microbatches);
  if (c.microBatchSize) batch = QStringLiteral("mbs %1, ").arg(*c.microBatchSize) + batch;
  parts << batch;
  if (c.chunksPerDevice > 1) parts << QStringLiteral("%1 chunks").arg(c.chunksPerDevice);
  if (par.recompute != Recompute::None)
    parts << QStringLiteral("recompute %1").arg(q(std::string(recomputeName(par.recompute))));
  if (par.zeroStage > 0) parts << QStringLiteral("ZeRO %1").arg(par.zeroStage);
  // What else tells two rows apart (rows that differ only there would read the same).
  if (par.expertTensor > 0 && par.expert > 1) parts << QStringLiteral("ETP %1").arg(par.expertTensor);
  if (par.tensor > 1 && !par.sequenceParallel) parts << QStringLiteral("no SP");
  if (c.seqSplits > 1) parts << QStringLiteral("%1 sequence splits").arg(c.seqSplits);
  if (c.offloadRatio > 0) parts << QStringLiteral("offload %1").arg(c.offloadRatio);
  if (!par.overlapGradReduce) parts << QStringLiteral("grad reduce exposed");
  if (!par.overlapParamGather && par.zeroStage > 0) parts << QStringLiteral("param gather exposed");
  if (par.tensor > 1 && !par.tpCommOverlap) parts << QStringLiteral("TP comm exposed");
  parts << hiddenSettings(c);
  return parts.join(QStringLiteral(" · "));
}

// --- ConfigureModel ---------------------------------------------------------------------------

ConfigureModel::ConfigureModel(QObject* parent) : QAbstractTableModel(parent) {}

void ConfigureModel::setResult(std::shared_ptr<const pipestudio::Configuration> result, std::int64_t capacityBytes) {
  beginResetModel();
  m_result = std::move(result);
  m_capacityBytes = capacityBytes;
  m_pinned.assign(m_result ? m_result->feasible.size() : 0, 0);
  endResetModel();
}

const ConfigCandidate& ConfigureModel::candidate(int row) const {
  return m_result->feasible[static_cast<std::size_t>(row)];
}

std::vector<int> ConfigureModel::pinnedRows() const {
  std::vector<int> rows;
  for (std::size_t r = 0; r < m_pinned.size(); ++r) {
    if (m_pinned[r]) rows.push_back(static_cast<int>(r));
  }
  return rows;
}

void ConfigureModel::setPinned(int row, bool pinned) {
  setData(index(row, Pin), pinned ? Qt::Checked : Qt::Unchecked, Qt::CheckStateRole);
}

std::int64_t ConfigureModel::headroomBytes(int row) const { return m_capacityBytes - candidate(row).peakMemoryBytes; }

int ConfigureModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !m_result ? 0 : static_cast<int>(m_result->feasible.size());
}

int ConfigureModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant ConfigureModel::data(const QModelIndex& index, int role) const {
  if (!isCell(this, index)) return {};
  const int row = index.row();
  const ConfigCandidate& c = candidate(row);
  const std::int64_t headroom = headroomBytes(row);
  if (role == Qt::CheckStateRole && index.column() == Pin)
    return m_pinned[static_cast<std::size_t>(row)] ? Qt::Checked : Qt::Unchecked;
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case Rank:
        return row + 1;
      case Configuration:
        return configurationText(c.config);
      case IterationMs:
        return q(formatMs(c.iterationMs));
      case TokensPerS:
        return QLocale().toString(c.metrics.tokensPerS, 'f', 0);
      case Mfu:
        return QStringLiteral("%1 %").arg(c.metrics.mfu * 100, 0, 'f', 1);
      case Headroom:
        if (m_capacityBytes <= 0) return QStringLiteral("—");
        return QStringLiteral("%1 (%2 %)")
            .arg(q(formatBytes(static_cast<double>(headroom))))
            .arg(100.0 * static_cast<double>(headroom) / static_cast<double>(m_capacityBytes), 0, 'f', 0);
      default:
        return {};
    }
  }
  if (role == Qt::UserRole) {  // raw numbers for sorting and tests
    switch (index.column()) {
      case Rank:
        return row + 1;
      case IterationMs:
        return c.iterationMs;
      case TokensPerS:
        return c.metrics.tokensPerS;
      case Mfu:
        return c.metrics.mfu;
      case Headroom:
        return static_cast<qlonglong>(headroom);
      default:
        return data(index, Qt::DisplayRole);
    }
  }
  if (role == Qt::ToolTipRole) {
    return QStringLiteral(
               "%1\nbubble %2 %, exposed gradient sync %3, peak %4 on the fullest GPU\nClick to load "
               "it into the solver panel")
        .arg(configurationText(c.config))
        .arg(c.bubbleRatio * 100, 0, 'f', 1)
        .arg(q(formatMs(c.allReduceMs)), q(formatBytes(static_cast<double>(c.peakMemoryBytes))));
  }
  if (role == Qt::ForegroundRole && index.column() == Headroom && m_capacityBytes > 0 &&
      static_cast<double>(headroom) < kTightHeadroom * static_cast<double>(m_capacityBytes)) {
    return QBrush(QColor(0xd0, 0x3a, 0x3a));
  }
  if (role == Qt::TextAlignmentRole && index.column() != Configuration && index.column() != Pin)
    return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
  return {};
}

bool ConfigureModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (!isCell(this, index) || index.column() != Pin || role != Qt::CheckStateRole) return false;
  m_pinned[static_cast<std::size_t>(index.row())] = value.toInt() == Qt::Checked ? 1 : 0;
  Q_EMIT dataChanged(index, index, {Qt::CheckStateRole});
  return true;
}

Qt::ItemFlags ConfigureModel::flags(const QModelIndex& index) const {
  if (!isCell(this, index)) return Qt::NoItemFlags;
  Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable;
  if (index.column() == Pin) f |= Qt::ItemIsUserCheckable;
  return f;
}

QVariant ConfigureModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || section < 0 || section >= ColumnCount) return {};
  static constexpr std::array<const char*, ColumnCount> kNames{"Pin", "#",        "Iteration",    "Tokens/s",
                                                               "MFU", "Headroom", "Configuration"};
  static constexpr std::array<const char*, ColumnCount> kTips{
      "Pin two rows to compare them side by side",
      "Rank by simulated throughput",
      "One training step (pipeline, gradient sync, optimizer)",
      "Tokens per second of the whole job",
      "Model FLOPs utilisation",
      "GPU memory left on the fullest GPU (capacity − peak)",
      "Schedule, parallel degrees, batch, chunks, recomputation, ZeRO"};
  const auto column = static_cast<std::size_t>(section);
  if (role == Qt::DisplayRole) return QString::fromLatin1(kNames[column]);
  if (role == Qt::ToolTipRole) return QString::fromLatin1(kTips[column]);
  return {};
}

// --- ConfigureDock ----------------------------------------------------------------------------

ConfigureDock::ConfigureDock(std::function<PlanRequest()> inputs, QWidget* parent)
    : QWidget(parent), m_inputs(std::move(inputs)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  auto* form = new QFormLayout;
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  buildKnobs(form);
  layout->addLayout(form);
  auto* buttons = new QHBoxLayout;
  m_searchButton = new QPushButton(QStringLiteral("Search"), this);
  m_searchButton->setToolTip(QStringLiteral("Search the configurations of the model and cluster in the editors"));
  m_cancelButton = new QPushButton(QStringLiteral("Cancel"), this);
  m_cancelButton->setEnabled(false);
  m_compareButton = new QPushButton(QStringLiteral("Compare pinned"), this);
  m_compareButton->setToolTip(QStringLiteral("Pin two rows: both are planned and shown in the compare view"));
  m_compareButton->setEnabled(false);
  buttons->addWidget(m_searchButton);
  buttons->addWidget(m_cancelButton);
  buttons->addWidget(m_compareButton);
  layout->addLayout(buttons);
  m_progress = new QProgressBar(this);
  m_progress->setRange(0, 100);
  m_progress->setVisible(false);
  layout->addWidget(m_progress);
  m_summary = new QLabel(QStringLiteral("Search for the fastest configuration that fits: press Search."), this);
  m_summary->setObjectName(QStringLiteral("ConfigureSummary"));
  m_summary->setWordWrap(true);
  m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(m_summary);

  auto* tabs = new QTabWidget(this);
  m_model = new ConfigureModel(this);
  m_table = new QTableView(tabs);
  m_table->setModel(m_model);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::SingleSelection);
  m_table->verticalHeader()->setVisible(false);
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_table->horizontalHeader()->setStretchLastSection(true);
  m_table->setAlternatingRowColors(true);
  tabs->addTab(m_table, QStringLiteral("Ranked"));
  m_rejected = new QTableWidget(0, 3, tabs);
  m_rejected->setObjectName(QStringLiteral("ConfigureRejected"));
  m_rejected->setHorizontalHeaderLabels({QStringLiteral("Family"), QStringLiteral("Schedule"), QStringLiteral("Why")});
  m_rejected->verticalHeader()->setVisible(false);
  m_rejected->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_rejected->horizontalHeader()->setStretchLastSection(true);
  tabs->addTab(m_rejected, QStringLiteral("Rejected"));
  layout->addWidget(tabs, 1);

  connect(m_searchButton, &QPushButton::clicked, this, &ConfigureDock::search);
  connect(m_cancelButton, &QPushButton::clicked, this, &ConfigureDock::cancel);
  connect(m_compareButton, &QPushButton::clicked, this, &ConfigureDock::comparePinned);
  connect(m_table, &QTableView::clicked, this, [this](const QModelIndex& index) {
    if (index.isValid() && index.column() != ConfigureModel::Pin) chooseRow(index.row());
  });
  connect(m_model, &QAbstractItemModel::dataChanged, this, &ConfigureDock::updateCompareButton);
  connect(m_model, &QAbstractItemModel::modelReset, this, &ConfigureDock::updateCompareButton);
  WheelGuard::install(this);
}

void ConfigureDock::buildKnobs(QFormLayout* form) {
  // One entry per option of the search: add a knob here when the configurator gains one.
  auto* globalBatch = new QSpinBox(this);
  globalBatch->setRange(0, std::numeric_limits<int>::max());
  globalBatch->setSpecialValueText(QStringLiteral("the panel's"));
  globalBatch->setToolTip(
      QStringLiteral("Samples per training step, held fixed (the panel's: its Global batch, else the model's "
                     "global_batch, else 4 per GPU)"));
  m_knobs.push_back({QStringLiteral("Global batch"), globalBatch, [globalBatch](ConfigureOptions& o) {
                       if (globalBatch->value() > 0) o.globalBatch = globalBatch->value();
                     }});
  auto* microBatchSizes = new QLineEdit(QStringLiteral("1, 2, 4, 8"), this);
  microBatchSizes->setToolTip(QStringLiteral("Micro-batch sizes to try, comma-separated"));
  m_knobs.push_back({QStringLiteral("Micro-batch sizes"), microBatchSizes, [microBatchSizes](ConfigureOptions& o) {
                       if (auto sizes = parseIntList(microBatchSizes->text()); sizes && !sizes->empty())
                         o.microBatchSizes = *sizes;
                     }});
  auto* schedules = new QLineEdit(this);
  schedules->setPlaceholderText(QStringLiteral("all"));
  schedules->setToolTip(QStringLiteral("Schedules to try, comma-separated (empty: every schedule)"));
  m_knobs.push_back({QStringLiteral("Schedules"), schedules, [schedules](ConfigureOptions& o) {
                       o.schedules.clear();
                       for (const QString& s :
                            schedules->text().split(QRegularExpression(QStringLiteral("[,\\s]+")), Qt::SkipEmptyParts))
                         o.schedules.push_back(s.toStdString());
                     }});
  auto* keep = new QSpinBox(this);
  keep->setRange(1, 1000);
  keep->setValue(ConfigureOptions{}.keep);
  keep->setToolTip(QStringLiteral("Configurations to rank"));
  m_knobs.push_back({QStringLiteral("Keep"), keep, [keep](ConfigureOptions& o) { o.keep = keep->value(); }});
  auto* budget = new QSpinBox(this);
  budget->setRange(1, 100000);
  budget->setValue(ConfigureOptions{}.maxSimulations);
  budget->setToolTip(QStringLiteral("At most this many plans are simulated (the search's budget, by work)"));
  m_knobs.push_back(
      {QStringLiteral("Simulations"), budget, [budget](ConfigureOptions& o) { o.maxSimulations = budget->value(); }});
  for (const Knob& k : m_knobs) form->addRow(k.label, k.widget);
}

QWidget* ConfigureDock::knob(const QString& label) const {
  for (const Knob& k : m_knobs) {
    if (k.label == label) return k.widget;
  }
  return nullptr;
}

ConfigureOptions ConfigureDock::options() const {
  ConfigureOptions o;
  for (const Knob& k : m_knobs) k.apply(o);
  return o;
}

void ConfigureDock::search() {
  m_searched = m_inputs();
  m_searching = true;
  m_progress->setValue(0);
  m_progress->setVisible(true);
  m_cancelButton->setEnabled(true);
  m_summary->setText(QStringLiteral("Searching the configurations of %1 on %2…")
                         .arg(q(m_searched.model.name), q(m_searched.cluster.name)));
  auto lastPercent = std::make_shared<std::atomic<int>>(-1);
  ConfigureOptions searchOptions = options();
  // The recipe every candidate shares (precision, overlap settings, recomputation details) is
  // the solver panel's, and so is the global batch unless the knob names one: a loaded row then
  // keeps the batch the panel said.
  searchOptions.recipe = m_searched.config;
  if (searchOptions.globalBatch == 0 && m_searched.config.globalBatch)
    searchOptions.globalBatch = *m_searched.config.globalBatch;
  m_searchJob.start(
      [model = m_searched.model, cluster = m_searched.cluster, options = std::move(searchOptions), lastPercent,
       this](const JobTracker::Control& job) {
        SolveControl control;
        control.cancel = job.cancelFlag();
        // Progress throttled to whole percents; the tracker drops it once the search is stale.
        control.progress = [&job, lastPercent, this](double fraction) {
          const int percent = static_cast<int>(std::lround(std::clamp(fraction, 0.0, 1.0) * 100));
          if (lastPercent->exchange(percent) == percent) return;
          job.post([this, percent]() { m_progress->setValue(percent); });
        };
        return configure(model, cluster, options, control);
      },
      [this](Expected<pipestudio::Configuration> result) { showResult(std::move(result)); });
}

void ConfigureDock::cancel() { m_searchJob.cancel(); }

void ConfigureDock::inputsReplaced(const std::string& model, const std::string& cluster) {
  const bool shown = m_model->result() != nullptr || m_searching;
  if (!shown || (m_searched.model.name == model && m_searched.cluster.name == cluster)) return;
  // Results of another model or cluster: loading one would set degrees this model may not take.
  m_searchJob.cancel();
  m_searchJob.invalidate();
  m_planJob.invalidate();
  m_searching = false;
  m_progress->setVisible(false);
  m_cancelButton->setEnabled(false);
  m_model->setResult(nullptr, 0);
  m_rejected->setRowCount(0);
  m_summary->setText(QStringLiteral("The ranked configurations were of %1 on %2: press Search for %3 on %4.")
                         .arg(q(m_searched.model.name), q(m_searched.cluster.name), q(model), q(cluster)));
}

bool ConfigureDock::waitForIdle(int timeoutMs) const {
  return m_searchJob.waitForIdle(timeoutMs) && m_planJob.waitForIdle(timeoutMs);
}

void ConfigureDock::showResult(Expected<pipestudio::Configuration> result) {
  m_searching = false;
  m_progress->setVisible(false);
  m_cancelButton->setEnabled(false);
  if (!result) {
    const QString text = result.error().isCancelled()
                             ? QStringLiteral("Search cancelled")
                             : QStringLiteral("Search failed: ") + withFieldNames(q(result.message()));
    m_summary->setText(text);
    Q_EMIT message(text, !result.error().isCancelled());
    return;
  }
  auto shared = std::make_shared<const pipestudio::Configuration>(std::move(*result));
  const std::int64_t capacity = m_searched.cluster.gpu.memoryGib > 0 ? m_searched.cluster.gpu.memoryBytes() : 0;
  m_model->setResult(shared, capacity);
  showRejected(*shared);
  const pipestudio::Configuration& c = *shared;
  m_summary->setText(
      QStringLiteral("%1 on %2, global batch %3: %4 configurations; %5 pruned by memory bounds, %6 screened "
                     "(%7 simulated in full), %8 bounded out (their estimate cannot enter the top); %9 ranked, "
                     "%10 families rejected (see Rejected).")
          .arg(q(m_searched.model.name), q(m_searched.cluster.name))
          .arg(c.globalBatch)
          .arg(c.enumerated)
          .arg(c.prunedByMemory)
          .arg(c.evaluated)
          .arg(c.simulatedInFull)
          .arg(c.boundedOut)
          .arg(c.feasible.size())
          .arg(c.rejected.size()));
  Q_EMIT message(c.feasible.empty() ? QStringLiteral("Configure: no configuration fits in memory")
                                    : QStringLiteral("Configure: %1 configurations ranked").arg(c.feasible.size()),
                 c.feasible.empty());
}

void ConfigureDock::showRejected(const pipestudio::Configuration& result) {
  m_rejected->setRowCount(static_cast<int>(result.rejected.size()));
  for (std::size_t r = 0; r < result.rejected.size(); ++r) {
    const ConfigRejection& rej = result.rejected[r];
    const QString reason = q(rej.reason);
    const std::array<QString, 3> cells{QStringLiteral("PP %1 × DP %2").arg(rej.pipelineDegree).arg(rej.dataParallel),
                                       q(rej.schedule), summaryLine(reason)};
    for (int c = 0; c < 3; ++c) {
      auto* item = new QTableWidgetItem(cells[static_cast<std::size_t>(c)]);
      item->setToolTip(reason);
      m_rejected->setItem(static_cast<int>(r), c, item);
    }
  }
  m_rejected->resizeColumnsToContents();
}

void ConfigureDock::chooseRow(int row) {
  if (row < 0 || row >= m_model->rowCount()) return;
  const PlanConfig& chosen = m_model->candidate(row).config;
  // The panel takes the searched global batch with the configuration: say so when it changes.
  const auto before = m_inputs().config.globalBatch;
  QString batch;
  if (chosen.globalBatch && before != chosen.globalBatch) {
    batch = before ? QStringLiteral(" (Global batch %1 → %2, as searched)").arg(*before).arg(*chosen.globalBatch)
                   : QStringLiteral(" (Global batch %1, as searched)").arg(*chosen.globalBatch);
  }
  Q_EMIT configurationChosen(chosen);
  Q_EMIT message(QStringLiteral("Loaded configuration #%1 into the solver panel: %2%3")
                     .arg(row + 1)
                     .arg(configurationText(chosen), batch),
                 false);
}

void ConfigureDock::updateCompareButton() { m_compareButton->setEnabled(m_model->pinnedRows().size() == 2); }

void ConfigureDock::comparePinned() {
  const std::vector<int> rows = m_model->pinnedRows();
  if (rows.size() != 2) {
    Q_EMIT message(QStringLiteral("Pin exactly two configurations to compare them"), true);
    return;
  }
  PlanRequest first = m_searched;
  first.config = m_model->candidate(rows[0]).config;
  PlanRequest second = m_searched;
  second.config = m_model->candidate(rows[1]).config;
  using Pair = std::pair<std::shared_ptr<const Plan>, std::shared_ptr<const Plan>>;
  m_planJob.start(
      [first, second](const JobTracker::Control& job) -> Expected<Pair> {
        SolveControl control;
        control.cancel = job.cancelFlag();
        PS_ASSIGN_OR_RETURN(auto a, makePlan(first, control));
        PS_ASSIGN_OR_RETURN(auto b, makePlan(second, control));
        return Pair{std::make_shared<const Plan>(std::move(a)), std::make_shared<const Plan>(std::move(b))};
      },
      [this](Expected<Pair> plans) {
        if (!plans) {
          Q_EMIT message(QStringLiteral("Compare pinned: ") + withFieldNames(q(plans.message())), true);
          return;
        }
        Q_EMIT compareRequested(plans->first, plans->second);
      });
}

}  // namespace pipestudio::gui
