#pragma once
// The solver panel (docs/gui.md): one field per PlanConfig member, the names GuiText.cpp maps
// the CLI's flags to. It reads and shows a PlanConfig and says when the user changed one
// (configEdited); what a change means (re-solve, mark the plan stale) is the window's business.
//
// Every edit is one undoable step on the window's QUndoStack (the same stack as the model and
// cluster editors, so Edit > Undo walks back through both in order). Spin and combo boxes take
// the mouse wheel only when they have focus: scrolling the panel never edits it.

#include <QWidget>
#include <cstdint>
#include <optional>

#include "pipestudio/plan/Plan.hpp"

class QComboBox;
class QSpinBox;
class QDoubleSpinBox;
class QLineEdit;
class QPushButton;
class QProgressBar;
class QLabel;
class QCheckBox;
class QUndoStack;
class QFormLayout;
class QVBoxLayout;
class QGroupBox;

namespace pipestudio::gui {

class SolverPanel : public QWidget {
  Q_OBJECT
 public:
  explicit SolverPanel(QWidget* parent = nullptr);

  /// The settings on screen. With the diffusionpipe partition the schedule box says "auto" and
  /// the schedule chosen before is kept (DiffusionPipe searches the schedules itself).
  PlanConfig config() const;
  /// Shows `config` without emitting configEdited and without an undo step.
  void setConfig(const PlanConfig& config);
  /// Shows `config` as one user edit named `what` (undoable; configEdited follows): a
  /// configuration chosen elsewhere, such as the Configure dock's.
  void loadConfig(const PlanConfig& config, const QString& what);
  /// Edits are pushed here as undoable steps (nullptr: not undoable).
  void setUndoStack(QUndoStack* stack) { m_undo = stack; }

  /// What is wrong with the Memory limit field (marked red in place), or nullopt.
  std::optional<QString> memoryLimitProblem() const;
  /// Enables and fills the fields derived from others: Microbatches from Global batch /
  /// (Micro-batch size × DP) with `samplesPerMicrobatch` as the model's micro-batch size;
  /// Sequence parallel only with TP > 1; the expert settings only for a model with experts.
  void updateDerivedFields(std::int64_t samplesPerMicrobatch, bool modelHasExperts = true);
  /// The DiffusionPipe partition chose `schedule`: the "auto" entry names it.
  void showChosenSchedule(const QString& schedule);

  /// One summary line (the whole text as tooltip); `details` shows the Details… button.
  void setMessage(const QString& text, bool error, bool details);
  QString messageText() const;
  /// A solve runs (progress bar, Cancel enabled) or not.
  void setSolving(bool solving);
  void setProgress(double fraction);
  bool autoSolveEnabled() const;

  // The fields, for the window's wiring and for tests that drive the panel like a user.
  QComboBox* schedule = nullptr;
  QSpinBox* devices = nullptr;
  QSpinBox* microbatches = nullptr;
  QSpinBox* chunks = nullptr;
  /// seq1f1b's sequence chunks per microbatch K (PlanConfig::seqSplits); Microbatches counts
  /// training microbatches, as --microbatches does, the plan K times as many units.
  QSpinBox* seqSplits = nullptr;
  QDoubleSpinBox* offloadRatio = nullptr;  ///< PlanConfig::offloadRatio (PipeOffload)
  QComboBox* partition = nullptr;
  QComboBox* fill = nullptr;
  QLineEdit* memoryLimit = nullptr;
  // Hybrid parallelism (issue 13): PlanConfig::parallel, globalBatch, microBatchSize, optimizerSync.
  QSpinBox* tp = nullptr;
  QSpinBox* cp = nullptr;
  QSpinBox* ep = nullptr;
  QSpinBox* dp = nullptr;
  QCheckBox* sequenceParallel = nullptr;
  QComboBox* recompute = nullptr;
  QComboBox* zero = nullptr;
  // The recipe (issue 25): PlanConfig::precision and the overlaps of Parallelism.
  QComboBox* precision = nullptr;
  QCheckBox* overlapGradReduce = nullptr;
  QCheckBox* overlapParamGather = nullptr;
  QCheckBox* tpCommOverlap = nullptr;
  // Mixture of experts (issue 47): the expert settings of Parallelism, enabled for MoE models.
  QGroupBox* moeGroup = nullptr;
  QSpinBox* etp = nullptr;                     ///< 0: as TP (Megatron's default)
  QComboBox* dispatcher = nullptr;             ///< alltoall, flex (DeepEP), flex (HybridEP)
  QDoubleSpinBox* capacityFactor = nullptr;    ///< kModelsCapacity: each layer's own; 0: dropless
  QCheckBox* permuteIntoDispatcher = nullptr;  ///< Parallelism::moePermuteFusionIntoDispatcher
  QSpinBox* combineChunk = nullptr;            ///< Parallelism::moeCombineChunkTokens; 0: the library's
  QDoubleSpinBox* rankBudget = nullptr;        ///< Parallelism::moeRankCapacityFactor; its minimum: none
  QCheckBox* pagedStash = nullptr;             ///< Parallelism::moePagedStash
  QDoubleSpinBox* stashFactor = nullptr;       ///< moePagedStashBufferFactor; its minimum: Megatron's default
  QCheckBox* moeA2aOverlap = nullptr;
  QCheckBox* sharedExpertOverlap = nullptr;
  QSpinBox* moeCommSms = nullptr;  ///< 0: the dispatcher's default
  /// Settings the panel has no field for, when a workspace or the Configure dock set them.
  QLabel* otherSettings = nullptr;
  QSpinBox* globalBatch = nullptr;     ///< 0: off (the microbatch count is given directly)
  QSpinBox* microBatchSize = nullptr;  ///< 0: the model's samples per microbatch
  QComboBox* optimizerSync = nullptr;
  QCheckBox* autoSolve = nullptr;
  QPushButton* solve = nullptr;
  QPushButton* cancel = nullptr;
  QProgressBar* progress = nullptr;
  QLabel* message = nullptr;  ///< one line; the whole message behind `details`
  QPushButton* details = nullptr;

 Q_SIGNALS:
  /// The user changed a setting (or undid / redid a change): `config` is what the panel shows.
  void configEdited(const pipestudio::PlanConfig& config);
  void solveRequested();
  void cancelRequested();
  void detailsRequested();
  /// The panel changed a setting along with the user's edit (the chunk count on a schedule
  /// switch): what and why, for the window to say.
  void settingAdjusted(const QString& note);

 private:
  /// What an undo step restores: the config and the Memory limit text as typed (which may not
  /// be a size yet).
  struct State {
    PlanConfig config;
    QString memoryLimitText;
  };
  friend class SolverPanelEdit;
  State state() const;
  void applyState(const State& state);
  void onPartitionChanged();
  /// A field changed: one undo step named after it, then configEdited.
  void onFieldEdited(const QString& field);
  /// The user picked another schedule: the chunk count follows it where it was the old
  /// schedule's default or the new one refuses it (noted through settingAdjusted).
  void onScheduleEdited();
  void updateOtherSettings();
  void buildPipelineGroup(QWidget* parent, QVBoxLayout* outer);
  void buildParallelGroup(QWidget* parent, QVBoxLayout* outer);
  void buildRecipeGroup(QWidget* parent, QVBoxLayout* outer);
  void buildMoeGroup(QWidget* parent, QVBoxLayout* outer);
  void buildSyncFreeMoeRows(QWidget* parent, QFormLayout* form);
  void buildBatchGroup(QWidget* parent, QVBoxLayout* outer);
  void buildButtons(QVBoxLayout* outer);
  void connectFields();

  QUndoStack* m_undo = nullptr;
  State m_shown;               ///< the state after the last edit or setConfig (an undo step's "before")
  PlanConfig m_base;           ///< the last config shown: what config() keeps of fields not on the panel
  QString m_explicitSchedule;  ///< the schedule chosen before DiffusionPipe took over the box
  bool m_loading = false;      ///< setting fields programmatically: no edit signals
};

}  // namespace pipestudio::gui
