#include "SolverPanel.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QUndoCommand>
#include <QUndoStack>
#include <QVBoxLayout>
#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "GuiText.hpp"
#include "SettingsFit.hpp"
#include "WheelGuard.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/plan/SequenceSplits.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "pipestudio/planner/Partition.hpp"
#include "pipestudio/planner/Planner.hpp"

namespace pipestudio::gui {

namespace {

constexpr const char* kAuto = "auto";
constexpr int kMaxGlobalBatch = std::numeric_limits<int>::max();
constexpr int kMaxMicroBatchSize = 1 << 20;
// Below the smallest factor Megatron takes (1.0): a factor spin box's "unset" (its special text).
constexpr double kUnsetFactor = 0.95;

QString q(const std::string& s) { return QString::fromStdString(s); }

QSpinBox* degreeSpin(QWidget* parent, int max, const QString& tip) {
  auto* spin = new QSpinBox(parent);
  spin->setRange(1, max);
  spin->setToolTip(tip);
  return spin;
}

QString memoryLimitTip() { return QStringLiteral("Per-device memory limit, e.g. 40GiB; empty = the GPU's memory"); }

/// The capacity factor of every MoE layer (--moe-capacity-factor): "model's" (each layer's own,
/// the value -1), "dropless" (0) or a factor; the arrows step from one to the next.
class CapacitySpin : public QDoubleSpinBox {
 public:
  static constexpr double kModels = -1;
  explicit CapacitySpin(QWidget* parent) : QDoubleSpinBox(parent) {
    setRange(kModels, 1000.0);
    setDecimals(2);
    setSingleStep(0.25);
    setSpecialValueText(QStringLiteral("model's"));
    setValue(kModels);
  }
  void stepBy(int steps) override {
    double v = value();
    if (v < 0) {
      if (steps <= 0) return;
      v = 0;
      --steps;
    }
    const double next = v + steps * singleStep();
    setValue(next < 0 ? kModels : next);
  }
  QString textFromValue(double v) const override {
    if (v == 0) return QStringLiteral("dropless");
    return QDoubleSpinBox::textFromValue(v);
  }
  double valueFromText(const QString& text) const override {
    if (QStringLiteral("dropless").startsWith(text.trimmed(), Qt::CaseInsensitive) && !text.trimmed().isEmpty())
      return 0;
    return QDoubleSpinBox::valueFromText(text);
  }
  QValidator::State validate(QString& text, int& pos) const override {
    const QString t = text.trimmed();
    if (t.compare(QStringLiteral("dropless"), Qt::CaseInsensitive) == 0) return QValidator::Acceptable;
    if (!t.isEmpty() && QStringLiteral("dropless").startsWith(t, Qt::CaseInsensitive)) return QValidator::Intermediate;
    return QDoubleSpinBox::validate(text, pos);
  }
};

// A titled group of the panel, added to `outer`, and the form its fields go in.
struct FormGroup {
  QGroupBox* group;
  QFormLayout* form;
};

FormGroup addFormGroup(const QString& title, QWidget* parent, QVBoxLayout* outer) {
  auto* group = new QGroupBox(title, parent);
  auto* form = new QFormLayout(group);
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  outer->addWidget(group);
  return {group, form};
}

}  // namespace

/// One edit of the panel: redo and undo show the state after and before it (the first redo,
/// on push, finds the panel already showing it). Consecutive edits of one field merge, so
/// typing "128" into a spin box is one step.
class SolverPanelEdit : public QUndoCommand {
 public:
  SolverPanelEdit(SolverPanel* panel, int field, const QString& text, SolverPanel::State before,
                  SolverPanel::State after)
      : QUndoCommand(text), m_panel(panel), m_field(field), m_before(std::move(before)), m_after(std::move(after)) {}
  int id() const override { return 0x5350; }  // "SP"
  bool mergeWith(const QUndoCommand* other) override {
    const auto* edit = dynamic_cast<const SolverPanelEdit*>(other);
    // Field -1: a whole configuration loaded at once, never merged.
    if (!edit || edit->m_panel != m_panel || m_field < 0 || edit->m_field != m_field) return false;
    m_after = edit->m_after;
    return true;
  }
  void redo() override {
    if (m_first) {
      m_first = false;
      return;
    }
    m_panel->applyState(m_after);
  }
  void undo() override { m_panel->applyState(m_before); }

 private:
  SolverPanel* m_panel;
  int m_field;
  SolverPanel::State m_before;
  SolverPanel::State m_after;
  bool m_first = true;
};

SolverPanel::SolverPanel(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("SolverPanel"));
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(4, 4, 4, 4);
  buildPipelineGroup(this, outer);
  buildParallelGroup(this, outer);
  buildRecipeGroup(this, outer);
  buildMoeGroup(this, outer);
  buildBatchGroup(this, outer);
  buildButtons(outer);
  outer->addStretch(1);
  connectFields();
  WheelGuard::install(this);
  m_explicitSchedule = schedule->currentData().toString();
  m_shown = state();
}

void SolverPanel::buildPipelineGroup(QWidget* parent, QVBoxLayout* outer) {
  const auto [group, form] = addFormGroup(QStringLiteral("Pipeline"), parent, outer);
  schedule = new QComboBox(group);
  for (const std::string& name : scheduleNames()) schedule->addItem(q(name), q(name));
  devices = degreeSpin(group, 4096, QStringLiteral("Pipeline size P: one lane per pipeline rank"));
  microbatches = new QSpinBox(group);
  microbatches->setRange(1, 1 << 20);
  chunks = new QSpinBox(group);
  chunks->setRange(1, 64);
  seqSplits = new QSpinBox(group);
  seqSplits->setRange(1, kMaxSeqSplits);
  seqSplits->setToolTip(
      QStringLiteral("seq1f1b (Seq1F1B): sequence chunks per microbatch, pipelined one by one; other schedules "
                     "take 1"));
  offloadRatio = new QDoubleSpinBox(group);
  offloadRatio->setRange(0.0, 1.0);
  offloadRatio->setSingleStep(0.25);
  offloadRatio->setDecimals(2);
  offloadRatio->setToolTip(
      QStringLiteral("PipeOffload: share of each device's chunks whose activations go to host memory between "
                     "forward and backward, chunk 0 first (0: none; pipeoffload takes one chunk when 0)"));
  partition = new QComboBox(group);
  for (const std::string& name : partitionNames()) partition->addItem(q(name));
  fill = new QComboBox(group);
  for (const std::string& name : fillModeNames()) fill->addItem(q(name));
  memoryLimit = new QLineEdit(group);
  memoryLimit->setPlaceholderText(QStringLiteral("GPU memory"));
  memoryLimit->setToolTip(memoryLimitTip());
  form->addRow(QStringLiteral("Schedule"), schedule);
  form->addRow(QStringLiteral("Devices"), devices);
  form->addRow(QStringLiteral("Microbatches"), microbatches);
  form->addRow(QStringLiteral("Chunks / device"), chunks);
  form->addRow(QStringLiteral("Sequence splits"), seqSplits);
  form->addRow(QStringLiteral("Offload ratio"), offloadRatio);
  form->addRow(QStringLiteral("Partition"), partition);
  form->addRow(QStringLiteral("Fill"), fill);
  form->addRow(QStringLiteral("Memory limit"), memoryLimit);
}

void SolverPanel::buildParallelGroup(QWidget* parent, QVBoxLayout* outer) {
  const auto [group, form] = addFormGroup(QStringLiteral("Parallelism"), parent, outer);
  tp = degreeSpin(group, 1024, QStringLiteral("Tensor parallelism T (Megatron): must divide the heads"));
  cp = degreeSpin(group, 1024, QStringLiteral("Context parallelism C (ring attention): the sequence splits over C"));
  dp = degreeSpin(group, 1 << 20, QStringLiteral("Data-parallel replicas D of the whole pipeline"));
  sequenceParallel = new QCheckBox(QStringLiteral("Sequence parallel"), group);
  sequenceParallel->setToolTip(QStringLiteral("Korthikanti et al. 2022 §4.2.2 (only with TP > 1)"));
  recompute = new QComboBox(group);
  recompute->addItems({QStringLiteral("none"), QStringLiteral("selective"), QStringLiteral("full")});
  recompute->setToolTip(
      QStringLiteral("Activation recomputation: selective recomputes attention's core, full "
                     "each layer's forward inside its backward"));
  zero = new QComboBox(group);
  zero->addItems({QStringLiteral("0"), QStringLiteral("1"), QStringLiteral("2"), QStringLiteral("3")});
  zero->setToolTip(QStringLiteral("ZeRO stage: 1 = distributed optimizer, 2 = + gradients, 3 = + parameters (FSDP)"));
  form->addRow(QStringLiteral("TP"), tp);
  form->addRow(QStringLiteral("CP"), cp);
  form->addRow(QStringLiteral("DP"), dp);
  form->addRow(sequenceParallel);
  form->addRow(QStringLiteral("Recompute"), recompute);
  form->addRow(QStringLiteral("ZeRO"), zero);
}

void SolverPanel::buildRecipeGroup(QWidget* parent, QVBoxLayout* outer) {
  const auto [group, form] = addFormGroup(QStringLiteral("Recipe"), parent, outer);
  precision = new QComboBox(group);
  for (const Precision p : kPrecisions) precision->addItem(q(std::string(precisionName(p))));
  precision->setToolTip(
      QStringLiteral("The weight GEMMs' format (--precision): fp8 (per-tensor) or fp8-block on Hopper, "
                     "mxfp8/nvfp4 on Blackwell; attention, norms and the optimizer stay in bf16/fp32 as "
                     "Transformer Engine runs them"));
  overlapGradReduce = new QCheckBox(QStringLiteral("Overlap gradient reduce"), group);
  overlapGradReduce->setToolTip(
      QStringLiteral("--overlap-grad-reduce: buckets reduced under the last backward passes, the last exposed"));
  overlapParamGather = new QCheckBox(QStringLiteral("Overlap parameter gather"), group);
  overlapParamGather->setToolTip(
      QStringLiteral("--overlap-param-gather: the distributed optimizer's all-gather under the next forward passes"));
  tpCommOverlap = new QCheckBox(QStringLiteral("Overlap TP communication"), group);
  tpCommOverlap->setToolTip(
      QStringLiteral("--tp-comm-overlap: Transformer Engine's userbuffers hide TP collectives under their GEMMs "
                     "(needs sequence parallelism)"));
  form->addRow(QStringLiteral("Precision"), precision);
  form->addRow(overlapGradReduce);
  form->addRow(overlapParamGather);
  form->addRow(tpCommOverlap);
  otherSettings = new QLabel(group);
  otherSettings->setObjectName(QStringLiteral("SolverOtherSettings"));
  otherSettings->setWordWrap(true);
  otherSettings->setTextFormat(Qt::PlainText);
  otherSettings->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  otherSettings->setToolTip(
      QStringLiteral("Settings without a field here, kept from the workspace, plan or configuration they came "
                     "from (pipestudio-cli plan sets them with its flags)"));
  otherSettings->setVisible(false);
  form->addRow(otherSettings);
}

void SolverPanel::buildMoeGroup(QWidget* parent, QVBoxLayout* outer) {
  // Megatron-Core's MoE knobs (docs/formats.md, the plan's expert settings): each changes the
  // expert layers' time, so each is on screen (and in the Metrics dock) rather than kept
  // invisibly from a workspace.
  const FormGroup moe = addFormGroup(QStringLiteral("Experts (MoE)"), parent, outer);
  moeGroup = moe.group;
  QFormLayout* form = moe.form;
  ep = degreeSpin(moeGroup, 4096,
                  QStringLiteral("Expert parallelism E (--ep): the experts split over E GPUs of the "
                                 "pipeline rank's T·C·D (MoE parallel folding)"));
  etp = new QSpinBox(moeGroup);
  etp->setRange(0, 1024);
  etp->setSpecialValueText(QStringLiteral("as TP"));
  etp->setToolTip(
      QStringLiteral("Tensor parallelism inside each expert (--etp, Megatron "
                     "--expert-tensor-parallel-size); ETP·EP must divide T·C·D"));
  dispatcher = new QComboBox(moeGroup);
  dispatcher->addItem(QStringLiteral("alltoall"));
  dispatcher->addItem(QStringLiteral("flex · DeepEP"));
  dispatcher->addItem(QStringLiteral("flex · HybridEP"));
  dispatcher->setToolTip(
      QStringLiteral("Token dispatcher (--moe-token-dispatcher, --moe-flex-backend): alltoall sends every routed "
                     "copy; flex sends a token once per NVLink domain holding its experts (DeepEP's or HybridEP's "
                     "kernels)"));
  capacityFactor = new CapacitySpin(moeGroup);
  capacityFactor->setToolTip(
      QStringLiteral("Capacity factor of every MoE layer (--moe-capacity-factor): model's = each layer's own, "
                     "dropless = no token dropped"));
  moeA2aOverlap = new QCheckBox(QStringLiteral("Overlap expert all-to-alls"), moeGroup);
  moeA2aOverlap->setToolTip(
      QStringLiteral("--moe-a2a-overlap (Megatron --overlap-moe-expert-parallel-comm): one microbatch's "
                     "all-to-alls under another's compute"));
  sharedExpertOverlap = new QCheckBox(QStringLiteral("Overlap shared experts"), moeGroup);
  sharedExpertOverlap->setToolTip(
      QStringLiteral("--moe-shared-expert-overlap: the shared experts computed while tokens are dispatched"));
  moeCommSms = new QSpinBox(moeGroup);
  moeCommSms->setRange(0, 1024);
  moeCommSms->setSpecialValueText(QStringLiteral("default"));
  moeCommSms->setToolTip(
      QStringLiteral("SMs the expert all-to-all kernels occupy (--moe-comm-sms; default: 20 for flex, NCCL's 32 "
                     "channels for alltoall)"));
  form->addRow(QStringLiteral("EP"), ep);
  form->addRow(QStringLiteral("ETP"), etp);
  form->addRow(QStringLiteral("Dispatcher"), dispatcher);
  form->addRow(QStringLiteral("Capacity factor"), capacityFactor);
  form->addRow(moeA2aOverlap);
  form->addRow(sharedExpertOverlap);
  form->addRow(QStringLiteral("All-to-all SMs"), moeCommSms);
  buildSyncFreeMoeRows(moeGroup, form);
}

// HybridEP's own settings and Megatron's sync-free MoE (a rank budget, the paged stash): what the
// CLI's --moe-permute-fusion-into-hybridep, --moe-combine-chunk-tokens,
// --moe-expert-rank-capacity-factor, --moe-paged-stash and
// --moe-paged-stash-buffer-size-factor-cuda set. The factors' spin boxes show their unset state at
// a minimum below the smallest factor (1.0) Megatron takes.
void SolverPanel::buildSyncFreeMoeRows(QWidget* parent, QFormLayout* form) {
  permuteIntoDispatcher = new QCheckBox(QStringLiteral("Permute inside HybridEP"), parent);
  permuteIntoDispatcher->setToolTip(
      QStringLiteral("--moe-permute-fusion-into-hybridep: HybridEP writes and reads the tokens in expert order, "
                     "no permutation kernels (flex · HybridEP only)"));
  combineChunk = new QSpinBox(parent);
  combineChunk->setRange(0, 65536);
  combineChunk->setSingleStep(32);
  combineChunk->setSpecialValueText(QStringLiteral("default"));
  combineChunk->setToolTip(
      QStringLiteral("HybridEP's combine chunk in tokens (--moe-combine-chunk-tokens, "
                     "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API; default 64; 32 to 65536)"));
  const auto factorSpin = [parent](const QString& unset, const QString& tip) {
    auto* spin = new QDoubleSpinBox(parent);
    spin->setRange(kUnsetFactor, 64.0);
    spin->setDecimals(2);
    spin->setSingleStep(0.05);
    spin->setSpecialValueText(unset);
    spin->setToolTip(tip);
    return spin;
  };
  rankBudget = factorSpin(QStringLiteral("none"),
                          QStringLiteral("HybridEP's token budget per rank over a balanced router's "
                                         "(--moe-expert-rank-capacity-factor): the dispatch needs no host wait "
                                         "and the experts' buffers take the budget's rows (flex · HybridEP only)"));
  pagedStash = new QCheckBox(QStringLiteral("Paged stash"), parent);
  pagedStash->setToolTip(
      QStringLiteral("--moe-paged-stash: the routed experts' saved activations in pages sized at the stash "
                     "factor of a balanced router's (needs a rank budget)"));
  stashFactor = factorSpin(QStringLiteral("default"),
                           QStringLiteral("--moe-paged-stash-buffer-size-factor-cuda: the stash's pages over a "
                                          "balanced router's rows (default 1.10)"));
  form->addRow(permuteIntoDispatcher);
  form->addRow(QStringLiteral("Combine chunk"), combineChunk);
  form->addRow(QStringLiteral("Rank budget"), rankBudget);
  form->addRow(pagedStash);
  form->addRow(QStringLiteral("Stash factor"), stashFactor);
}

void SolverPanel::buildBatchGroup(QWidget* parent, QVBoxLayout* outer) {
  const auto [group, form] = addFormGroup(QStringLiteral("Batch"), parent, outer);
  globalBatch = new QSpinBox(group);
  globalBatch->setRange(0, kMaxGlobalBatch);
  globalBatch->setSpecialValueText(QStringLiteral("off"));
  globalBatch->setToolTip(
      QStringLiteral("Samples per training step; with it, Microbatches = Global batch / "
                     "(Micro-batch size × DP)"));
  microBatchSize = new QSpinBox(group);
  microBatchSize->setRange(0, kMaxMicroBatchSize);
  microBatchSize->setSpecialValueText(QStringLiteral("model's"));
  microBatchSize->setToolTip(QStringLiteral("Samples per microbatch (the model file's when not set)"));
  optimizerSync = new QComboBox(group);
  optimizerSync->addItems({QStringLiteral("global"), QStringLiteral("post-validation")});
  optimizerSync->setToolTip(QStringLiteral("post-validation: Zero Bubble's optimizer step overlaps iterations"));
  form->addRow(QStringLiteral("Global batch"), globalBatch);
  form->addRow(QStringLiteral("Micro-batch size"), microBatchSize);
  form->addRow(QStringLiteral("Optimizer sync"), optimizerSync);
}

void SolverPanel::buildButtons(QVBoxLayout* outer) {
  autoSolve = new QCheckBox(QStringLiteral("Re-solve on change"), this);
  autoSolve->setChecked(true);
  outer->addWidget(autoSolve);
  auto* buttons = new QHBoxLayout;
  solve = new QPushButton(QStringLiteral("Solve"), this);
  solve->setDefault(true);
  solve->setToolTip(QStringLiteral("Solve now (F5)"));
  cancel = new QPushButton(QStringLiteral("Cancel"), this);
  cancel->setEnabled(false);
  buttons->addWidget(solve);
  buttons->addWidget(cancel);
  outer->addLayout(buttons);
  progress = new QProgressBar(this);
  progress->setRange(0, 100);
  progress->setVisible(false);
  outer->addWidget(progress);
  auto* messageRow = new QHBoxLayout;
  message = new QLabel(this);
  message->setObjectName(QStringLiteral("SolverMessage"));
  message->setWordWrap(true);
  message->setTextFormat(Qt::PlainText);
  message->setTextInteractionFlags(Qt::TextSelectableByMouse);
  // One summary (wrapped to at most five lines); the whole message is behind Details….
  message->setMaximumHeight(5 * message->fontMetrics().lineSpacing() + 4);
  message->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  details = new QPushButton(QStringLiteral("Details…"), this);
  details->setVisible(false);
  messageRow->addWidget(message, 1);
  messageRow->addWidget(details, 0, Qt::AlignTop);
  outer->addLayout(messageRow);
}

void SolverPanel::connectFields() {
  connect(solve, &QPushButton::clicked, this, &SolverPanel::solveRequested);
  connect(cancel, &QPushButton::clicked, this, &SolverPanel::cancelRequested);
  connect(details, &QPushButton::clicked, this, &SolverPanel::detailsRequested);
  connect(partition, &QComboBox::currentTextChanged, this, [this]() {
    onPartitionChanged();
    onFieldEdited(QStringLiteral("Partition"));
  });
  connect(schedule, &QComboBox::currentIndexChanged, this, [this]() {
    if (!m_loading && schedule->currentData().toString() != QLatin1String(kAuto))
      m_explicitSchedule = schedule->currentData().toString();
  });
  connect(schedule, &QComboBox::currentTextChanged, this, &SolverPanel::onScheduleEdited);
  // Each field's edit is one undo step, named after the field.
  const auto reportEdits = [this](auto* field, auto signal, const char* name) {
    connect(field, signal, this, [this, step = QString::fromUtf8(name)]() { onFieldEdited(step); });
  };
  const std::array<std::pair<QComboBox*, const char*>, 7> combos{{{schedule, "Schedule"},
                                                                  {fill, "Fill"},
                                                                  {recompute, "Recompute"},
                                                                  {zero, "ZeRO"},
                                                                  {precision, "Precision"},
                                                                  {optimizerSync, "Optimizer sync"},
                                                                  {dispatcher, "Dispatcher"}}};
  for (const auto& [combo, name] : combos) reportEdits(combo, &QComboBox::currentTextChanged, name);
  const std::array<std::pair<QSpinBox*, const char*>, 13> spins{{{devices, "Devices"},
                                                                 {microbatches, "Microbatches"},
                                                                 {chunks, "Chunks / device"},
                                                                 {seqSplits, "Sequence splits"},
                                                                 {tp, "TP"},
                                                                 {cp, "CP"},
                                                                 {ep, "EP"},
                                                                 {dp, "DP"},
                                                                 {globalBatch, "Global batch"},
                                                                 {microBatchSize, "Micro-batch size"},
                                                                 {etp, "ETP"},
                                                                 {moeCommSms, "All-to-all SMs"},
                                                                 {combineChunk, "Combine chunk"}}};
  for (const auto& [spin, name] : spins) reportEdits(spin, &QSpinBox::valueChanged, name);
  const std::array<std::pair<QCheckBox*, const char*>, 8> boxes{{{sequenceParallel, "Sequence parallel"},
                                                                 {overlapGradReduce, "Overlap gradient reduce"},
                                                                 {overlapParamGather, "Overlap parameter gather"},
                                                                 {tpCommOverlap, "Overlap TP communication"},
                                                                 {moeA2aOverlap, "Overlap expert all-to-alls"},
                                                                 {sharedExpertOverlap, "Overlap shared experts"},
                                                                 {permuteIntoDispatcher, "Permute inside HybridEP"},
                                                                 {pagedStash, "Paged stash"}}};
  for (const auto& [box, name] : boxes) reportEdits(box, &QCheckBox::toggled, name);
  reportEdits(offloadRatio, &QDoubleSpinBox::valueChanged, "Offload ratio");
  reportEdits(capacityFactor, &QDoubleSpinBox::valueChanged, "Capacity factor");
  reportEdits(rankBudget, &QDoubleSpinBox::valueChanged, "Rank budget");
  reportEdits(stashFactor, &QDoubleSpinBox::valueChanged, "Stash factor");
  connect(memoryLimit, &QLineEdit::editingFinished, this, [this]() {
    // editingFinished also fires on focus loss without a change: only a change is an edit.
    if (memoryLimit->text() != m_shown.memoryLimitText) onFieldEdited(QStringLiteral("Memory limit"));
  });
}

// --- reading and showing -----------------------------------------------------------------

PlanConfig SolverPanel::config() const {
  // Fields the panel does not show (precision, overlap settings, vocabulary barriers, …) keep
  // what the last shown config held: editing the panel never drops them.
  PlanConfig c = m_base;
  c.memoryLimitBytes.reset();
  c.globalBatch.reset();
  c.microBatchSize.reset();
  const QString scheduleName = schedule->currentData().toString();
  c.schedule = (scheduleName == QLatin1String(kAuto) ? m_explicitSchedule : scheduleName).toStdString();
  c.devices = devices->value();
  c.seqSplits = seqSplits->value();
  c.microbatches = microbatches->value() * c.seqSplits;  // units: K sequence chunks per microbatch
  c.offloadRatio = offloadRatio->value();
  c.chunksPerDevice = chunks->value();
  c.partition = partition->currentText().toStdString();
  c.fill = fill->currentText().toStdString();
  const QString limit = memoryLimit->text().trimmed();
  if (!limit.isEmpty()) {
    if (auto b = parseBytes(limit.toStdString()); b && *b > 0) c.memoryLimitBytes = *b;
  }
  Parallelism& par = c.parallel;
  par.tensor = tp->value();
  par.context = cp->value();
  par.expert = ep->value();
  par.data = dp->value();
  par.sequenceParallel = par.tensor > 1 && sequenceParallel->isChecked();
  par.recompute = recomputeFromName(recompute->currentText().toStdString()).value_or(Recompute::None);
  par.zeroStage = zero->currentIndex();
  c.precision = precisionFromName(precision->currentText().toStdString()).value_or(Precision::Bf16);
  par.overlapGradReduce = overlapGradReduce->isChecked();
  par.overlapParamGather = overlapParamGather->isChecked();
  par.tpCommOverlap = tpCommOverlap->isChecked();
  par.expertTensor = etp->value();
  par.moeFlexDispatcher = dispatcher->currentIndex() > 0;
  par.moeFlexBackend = dispatcher->currentIndex() == 2 ? FlexBackend::HybridEp : FlexBackend::DeepEp;
  par.moeCapacityFactor.reset();
  if (capacityFactor->value() >= 0) par.moeCapacityFactor = capacityFactor->value();
  par.moeA2aOverlap = moeA2aOverlap->isChecked();
  par.moeSharedExpertOverlap = sharedExpertOverlap->isChecked();
  par.moeCommSms = moeCommSms->value();
  par.moePermuteFusionIntoDispatcher = permuteIntoDispatcher->isChecked();
  par.moeCombineChunkTokens = combineChunk->value();
  par.moeRankCapacityFactor.reset();
  if (rankBudget->value() > kUnsetFactor) par.moeRankCapacityFactor = rankBudget->value();
  par.moePagedStash = pagedStash->isChecked();
  par.moePagedStashBufferFactor = stashFactor->value() > kUnsetFactor ? stashFactor->value() : 0.0;
  if (globalBatch->value() > 0) c.globalBatch = globalBatch->value();
  if (microBatchSize->value() > 0) c.microBatchSize = microBatchSize->value();
  c.optimizerSync = optimizerSync->currentText().toStdString();
  return c;
}

SolverPanel::State SolverPanel::state() const { return {config(), memoryLimit->text()}; }

void SolverPanel::applyState(const State& s) {
  setConfig(s.config);
  const bool wasLoading = m_loading;
  m_loading = true;
  memoryLimit->setText(s.memoryLimitText);
  m_loading = wasLoading;
  m_shown = state();
  Q_EMIT configEdited(config());
}

void SolverPanel::setConfig(const PlanConfig& c) {
  const bool wasLoading = m_loading;
  m_loading = true;
  m_base = c;
  m_explicitSchedule = q(c.schedule);
  partition->setCurrentText(QStringLiteral("balanced"));  // leaves "auto" mode, if on
  onPartitionChanged();
  const int scheduleIndex = schedule->findData(q(c.schedule));
  if (scheduleIndex >= 0) {
    schedule->setCurrentIndex(scheduleIndex);
  } else if (!c.schedule.empty()) {
    schedule->addItem(q(c.schedule), q(c.schedule));
    schedule->setCurrentIndex(schedule->count() - 1);
  }
  devices->setValue(c.devices);
  seqSplits->setValue(std::clamp(c.seqSplits, 1, kMaxSeqSplits));
  microbatches->setValue(c.trainingMicrobatches());
  offloadRatio->setValue(c.offloadRatio);
  chunks->setValue(c.chunksPerDevice);
  if (fill->findText(q(c.fill)) < 0) fill->addItem(q(c.fill));
  fill->setCurrentText(q(c.fill));
  memoryLimit->setText(c.memoryLimitBytes ? q(formatBytes(static_cast<double>(*c.memoryLimitBytes))) : QString());
  const Parallelism& par = c.parallel;
  tp->setValue(par.tensor);
  cp->setValue(par.context);
  ep->setValue(par.expert);
  dp->setValue(par.data);
  // At TP 1 the box shows the default for when TP is raised (on, as the command line).
  sequenceParallel->setChecked(par.tensor > 1 ? par.sequenceParallel : true);
  recompute->setCurrentText(q(std::string(recomputeName(par.recompute))));
  zero->setCurrentIndex(std::clamp(par.zeroStage, 0, 3));
  precision->setCurrentText(q(std::string(precisionName(c.precision))));
  overlapGradReduce->setChecked(par.overlapGradReduce);
  overlapParamGather->setChecked(par.overlapParamGather);
  tpCommOverlap->setChecked(par.tpCommOverlap);
  etp->setValue(std::clamp(par.expertTensor, 0, etp->maximum()));
  dispatcher->setCurrentIndex(!par.moeFlexDispatcher ? 0 : par.moeFlexBackend == FlexBackend::HybridEp ? 2 : 1);
  capacityFactor->setValue(par.moeCapacityFactor ? std::max(0.0, *par.moeCapacityFactor) : CapacitySpin::kModels);
  moeA2aOverlap->setChecked(par.moeA2aOverlap);
  sharedExpertOverlap->setChecked(par.moeSharedExpertOverlap);
  moeCommSms->setValue(std::clamp(par.moeCommSms, 0, moeCommSms->maximum()));
  permuteIntoDispatcher->setChecked(par.moePermuteFusionIntoDispatcher);
  combineChunk->setValue(std::clamp(par.moeCombineChunkTokens, 0, combineChunk->maximum()));
  rankBudget->setValue(par.moeRankCapacityFactor ? *par.moeRankCapacityFactor : kUnsetFactor);
  pagedStash->setChecked(par.moePagedStash);
  stashFactor->setValue(par.moePagedStashBufferFactor > 0 ? par.moePagedStashBufferFactor : kUnsetFactor);
  globalBatch->setValue(c.globalBatch ? static_cast<int>(std::min<std::int64_t>(*c.globalBatch, kMaxGlobalBatch)) : 0);
  microBatchSize->setValue(
      c.microBatchSize ? static_cast<int>(std::min<std::int64_t>(*c.microBatchSize, kMaxMicroBatchSize)) : 0);
  optimizerSync->setCurrentText(q(c.optimizerSync));
  if (partition->findText(q(c.partition)) < 0) partition->addItem(q(c.partition));
  partition->setCurrentText(q(c.partition));
  onPartitionChanged();
  memoryLimit->setStyleSheet(QString());
  memoryLimit->setToolTip(memoryLimitTip());
  m_loading = wasLoading;
  m_shown = state();
  updateOtherSettings();
}

void SolverPanel::updateOtherSettings() {
  const QStringList other = hiddenSettings(m_base);
  otherSettings->setText(QStringLiteral("Also set: ") + other.join(QStringLiteral(" · ")));
  otherSettings->setVisible(!other.isEmpty());
}

void SolverPanel::onScheduleEdited() {
  if (m_loading || schedule->currentData().toString() == QLatin1String(kAuto)) return;
  PlanConfig c = config();
  const QString note = fitChunksToSchedule(c, m_shown.config.schedule);
  if (note.isEmpty()) return;
  // The chunk count changes in the same undo step as the schedule (onFieldEdited follows).
  const bool wasLoading = m_loading;
  m_loading = true;
  chunks->setValue(c.chunksPerDevice);
  m_loading = wasLoading;
  Q_EMIT settingAdjusted(note);
}

void SolverPanel::loadConfig(const PlanConfig& config, const QString& what) {
  const State before = m_shown;
  setConfig(config);
  if (m_undo) m_undo->push(new SolverPanelEdit(this, -1, what, before, m_shown));
  Q_EMIT configEdited(this->config());
}

void SolverPanel::onPartitionChanged() {
  // With the diffusionpipe partition DiffusionPipe searches the schedules itself: the box says
  // "auto" (and, once solved, which one it chose) instead of a schedule it will not honour.
  const bool wasLoading = m_loading;
  m_loading = true;
  const bool diffusion = partition->currentText() == QStringLiteral("diffusionpipe");
  const bool hasAuto = schedule->count() > 0 && schedule->itemData(0).toString() == QLatin1String(kAuto);
  if (diffusion && !hasAuto) {
    schedule->insertItem(0, QStringLiteral("auto — DiffusionPipe picks the schedule"), QString::fromLatin1(kAuto));
    schedule->setCurrentIndex(0);
    schedule->setEnabled(false);
    schedule->setToolTip(
        QStringLiteral("The diffusionpipe partition plans partition and schedule together: "
                       "it tries every schedule and keeps the fastest that fits"));
  } else if (!diffusion && hasAuto) {
    schedule->removeItem(0);
    const int index = schedule->findData(m_explicitSchedule);
    if (index >= 0) schedule->setCurrentIndex(index);
    schedule->setEnabled(true);
    schedule->setToolTip(QString());
  }
  m_loading = wasLoading;
}

void SolverPanel::showChosenSchedule(const QString& chosen) {
  if (schedule->count() == 0 || schedule->itemData(0).toString() != QLatin1String(kAuto)) return;
  const bool wasLoading = m_loading;
  m_loading = true;
  const QString text = QStringLiteral("auto — DiffusionPipe chose %1").arg(chosen);
  schedule->setItemText(0, text);
  // The narrow box may cut the text: its tooltip says it whole.
  schedule->setToolTip(text + QStringLiteral(" (the diffusionpipe partition tries every schedule and keeps "
                                             "the fastest that fits)"));
  m_loading = wasLoading;
}

void SolverPanel::onFieldEdited(const QString& field) {
  if (m_loading) return;
  // The Memory limit is checked in place: the field turns red and says what it expects.
  if (const auto problem = memoryLimitProblem()) {
    memoryLimit->setStyleSheet(QStringLiteral("QLineEdit { background: rgba(229, 57, 53, 0.35); }"));
    memoryLimit->setToolTip(*problem);
  } else {
    memoryLimit->setStyleSheet(QString());
    memoryLimit->setToolTip(memoryLimitTip());
  }
  State after = state();
  if (m_undo) {
    static const QStringList kFields{QStringLiteral("Schedule"),
                                     QStringLiteral("Devices"),
                                     QStringLiteral("Microbatches"),
                                     QStringLiteral("Chunks / device"),
                                     QStringLiteral("Partition"),
                                     QStringLiteral("Fill"),
                                     QStringLiteral("Memory limit"),
                                     QStringLiteral("TP"),
                                     QStringLiteral("CP"),
                                     QStringLiteral("EP"),
                                     QStringLiteral("DP"),
                                     QStringLiteral("Sequence parallel"),
                                     QStringLiteral("Recompute"),
                                     QStringLiteral("ZeRO"),
                                     QStringLiteral("Global batch"),
                                     QStringLiteral("Micro-batch size"),
                                     QStringLiteral("Optimizer sync"),
                                     QStringLiteral("Sequence splits"),
                                     QStringLiteral("Offload ratio"),
                                     QStringLiteral("Precision"),
                                     QStringLiteral("Overlap gradient reduce"),
                                     QStringLiteral("Overlap parameter gather"),
                                     QStringLiteral("Overlap TP communication"),
                                     QStringLiteral("ETP"),
                                     QStringLiteral("Dispatcher"),
                                     QStringLiteral("Capacity factor"),
                                     QStringLiteral("Overlap expert all-to-alls"),
                                     QStringLiteral("Overlap shared experts"),
                                     QStringLiteral("All-to-all SMs")};
    m_undo->push(new SolverPanelEdit(this, static_cast<int>(kFields.indexOf(field)),
                                     QStringLiteral("change %1").arg(field), m_shown, after));
  }
  m_shown = std::move(after);
  Q_EMIT configEdited(config());
}

std::optional<QString> SolverPanel::memoryLimitProblem() const {
  const QString limit = memoryLimit->text().trimmed();
  if (limit.isEmpty()) return std::nullopt;
  auto b = parseBytes(limit.toStdString());
  if (b && *b > 0) return std::nullopt;
  return QStringLiteral("'%1' is not a size (expected e.g. 40GiB, 80GB or bytes)").arg(limit);
}

void SolverPanel::updateDerivedFields(std::int64_t samplesPerMicrobatch, bool modelHasExperts) {
  const bool fromBatch = globalBatch->value() > 0;
  // A dense model has no expert layers: the group stays readable (what a workspace holds) but
  // greyed, and the window resets it when such a model is opened.
  moeGroup->setEnabled(modelHasExperts || ep->value() > 1);
  moeGroup->setToolTip(modelHasExperts ? QString() : QStringLiteral("The model has no mixture-of-experts layers"));
  microbatches->setEnabled(!fromBatch);
  sequenceParallel->setEnabled(tp->value() > 1);
  tpCommOverlap->setEnabled(tp->value() > 1);
  if (fromBatch) {
    // microbatches = G / (B·D) (resolveRequest's rule), shown even while another field is wrong.
    const PlanConfig c = config();
    const std::int64_t b = c.microBatchSize.value_or(samplesPerMicrobatch);
    const std::int64_t perMicrobatch = std::max<std::int64_t>(1, b) * c.parallel.data;
    const std::int64_t g = *c.globalBatch;
    if (g % perMicrobatch == 0 && g / perMicrobatch <= microbatches->maximum()) {
      const bool wasLoading = m_loading;
      m_loading = true;
      microbatches->setValue(static_cast<int>(g / perMicrobatch));
      m_loading = wasLoading;
      m_shown.config.microbatches = microbatches->value();
    }
  }
  microbatches->setToolTip(fromBatch ? QStringLiteral("Derived: Global batch / (Micro-batch size × DP)") : QString());
}

// --- state of a solve ----------------------------------------------------------------------

void SolverPanel::setMessage(const QString& text, bool error, bool showDetails) {
  message->setText(summaryLine(text));
  message->setToolTip(text);
  message->setStyleSheet(error ? QStringLiteral("QLabel { color: #e53935; }") : QString());
  details->setVisible(showDetails);
}

QString SolverPanel::messageText() const { return message->text(); }

void SolverPanel::setSolving(bool solving) {
  if (solving) progress->setValue(0);
  progress->setVisible(solving);
  cancel->setEnabled(solving);
}

void SolverPanel::setProgress(double fraction) { progress->setValue(static_cast<int>(fraction * 100)); }

bool SolverPanel::autoSolveEnabled() const { return autoSolve->isChecked(); }

}  // namespace pipestudio::gui
