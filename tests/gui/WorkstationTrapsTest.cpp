// Issue 47 (the workstation's loop without traps), driven through the real MainWindow on the
// offscreen platform: each test walks the sequence that went wrong for a new user — a fresh
// session's first import, an import after an import, MoE settings, the default workspace against
// the bundled files, Run Locally after a failed solve, unsaved edits before an open, torchtitan's
// current configuration from the window — and the smaller items that came with them.
#include <gtest/gtest.h>

#include <QAction>
#include <QCheckBox>
#include <QComboBox>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFileInfo>
#include <QGroupBox>
#include <QLabel>
#include <QMenu>
#include <QMenuBar>
#include <QPushButton>
#include <QSpinBox>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QUndoStack>
#include <algorithm>
#include <memory>

#include "GuiText.hpp"
#include "HistoryDock.hpp"
#include "MainWindow.hpp"
#include "QtTestApp.hpp"
#include "RunController.hpp"
#include "RunLocalDialog.hpp"
#include "SettingsFit.hpp"
#include "SolveController.hpp"
#include "SolverPanel.hpp"
#include "WindowFixtures.hpp"
#include "pipestudio/history/HistoryStore.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/SolverNames.hpp"
#include "pipestudio/viz/CompareView.hpp"
#include "pipestudio/viz/MemoryBreakdownView.hpp"
#include "pipestudio/viz/MetricsModel.hpp"
#include "pipestudio/viz/SpecModels.hpp"
#include "pipestudio/viz/TimelinePlottable.hpp"
#include "pipestudio/viz/TimelineView.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasValue;

namespace pipestudio::gui {
namespace {

const std::string kTrapResources = PIPESTUDIO_RESOURCES;
const QString kHta = QStringLiteral(PIPESTUDIO_TEST_DATA "/trace/hta/");

using pipestudio::testing::bundledWorkspace;
using pipestudio::testing::forgetSession;
using pipestudio::testing::pipelineConfig;
using pipestudio::testing::recomputedPipelineConfig;

QString resource(const std::string& path) { return QString::fromStdString(kTrapResources + "/" + path); }

/// The default history database of this test: $XDG_DATA_HOME in a temporary folder, so a fresh
/// session's import writes there and never into the user's history.
class ScopedDataHome {
 public:
  ScopedDataHome() : m_previous(qgetenv("XDG_DATA_HOME")), m_had(qEnvironmentVariableIsSet("XDG_DATA_HOME")) {
    qputenv("XDG_DATA_HOME", m_dir.path().toUtf8());
  }
  ~ScopedDataHome() {
    if (m_had) {
      qputenv("XDG_DATA_HOME", m_previous);
    } else {
      qunsetenv("XDG_DATA_HOME");
    }
  }
  ScopedDataHome(const ScopedDataHome&) = delete;
  ScopedDataHome& operator=(const ScopedDataHome&) = delete;
  QString database() const { return m_dir.path() + QStringLiteral("/pipestudio/history.sqlite"); }

 private:
  QTemporaryDir m_dir;
  QByteArray m_previous;
  bool m_had;
};

class TrapsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pipestudio::testing::qtApp();
    forgetSession();
    window = std::make_unique<MainWindow>();
    window->setUnsavedChangesHandler([this] {
      ++asked;
      return answer;
    });
    window->solveController()->setDebounceMs(20);
  }
  void TearDown() override {
    window.reset();
    forgetSession();
  }
  void openDefault() {
    ASSERT_TRUE(window->openDefaultWorkspace());
    waitForSolve();
    ASSERT_TRUE(window->currentPlan()) << window->statusText().toStdString();
  }
  void openBundled(const std::string& model, const std::string& cluster, const PlanConfig& config) {
    window->setWorkspace(bundledWorkspace(model, cluster, config), QString());
    waitForSolve();
  }
  void waitForSolve() { ASSERT_TRUE(window->solveController()->waitForIdle(120000)); }
  void openModel(const std::string& file) {
    QString error;
    ASSERT_TRUE(window->openFile(resource("models/" + file), &error, true)) << error.toStdString();
    waitForSolve();
  }
  /// A Qwen3-30B-A3B plan on 32 H100s: PP 4 × DP 8 with EP 8.
  static PlanConfig qwenConfig() {
    PlanConfig c = pipelineConfig("1f1b", 4);
    c.globalBatch = 256;
    c.parallel.data = 8;
    c.parallel.expert = 8;
    c.parallel.zeroStage = 1;
    c.parallel.recompute = Recompute::Full;
    return c;
  }
  std::unique_ptr<MainWindow> window;
  QMessageBox::StandardButton answer = QMessageBox::Discard;
  int asked = 0;
};

// --- 1: a fresh session's first import -----------------------------------------------------------

TEST_F(TrapsTest, AFreshSessionImportsATraceWithoutTheHistoryDockEverShown) {
  const ScopedDataHome home;
  ASSERT_EQ(window->historyDock()->store(), nullptr);  // nothing opened the database yet
  QString error;
  ASSERT_TRUE(window->openFile(QStringLiteral(PIPESTUDIO_TEST_DATA "/trace/plan-zb-h1.json"), &error, true))
      << error.toStdString();
  const auto plan = window->currentPlan();
  ASSERT_TRUE(
      window->importTraces({kHta + QStringLiteral("rank0.json.gz"), kHta + QStringLiteral("rank1.json.gz")}, &error))
      << error.toStdString();
  // The default database opened on demand, the run is in it and compared with the plan.
  ASSERT_NE(window->historyDock()->store(), nullptr);
  EXPECT_EQ(QFileInfo(QString::fromStdString(window->historyDock()->store()->path())).canonicalFilePath(),
            QFileInfo(home.database()).canonicalFilePath());
  auto store = history::HistoryStore::open(home.database().toStdString());
  ASSERT_THAT(store, HasValue());
  auto runs = store->listRuns();
  ASSERT_THAT(runs, HasValue());
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_TRUE(runs->front().planId.has_value());
  EXPECT_EQ(window->compareView()->baseline(), plan);
  EXPECT_TRUE(window->statusText().startsWith(QStringLiteral("Imported run"))) << window->statusText().toStdString();
}

TEST_F(TrapsTest, AnUnopenableHistorySaysWhyInsteadOfDroppingTheFiles) {
  QTemporaryDir dir;
  // A file where the database's folder should be: the database cannot be created.
  QFile blocker(dir.filePath(QStringLiteral("pipestudio")));
  ASSERT_TRUE(blocker.open(QIODevice::WriteOnly));
  blocker.close();
  const QByteArray previous = qgetenv("XDG_DATA_HOME");
  qputenv("XDG_DATA_HOME", dir.path().toUtf8());
  QString error;
  EXPECT_FALSE(window->importTraces({kHta + QStringLiteral("rank0.json.gz")}, &error));
  qputenv("XDG_DATA_HOME", previous);
  EXPECT_TRUE(error.contains(QStringLiteral("history database"))) << error.toStdString();
  EXPECT_TRUE(error.contains(dir.path())) << error.toStdString();
}

// --- 2: import after import ------------------------------------------------------------------------

TEST_F(TrapsTest, ASecondImportIsComparedWithThePlanAndLeavesThePinnedBaseline) {
  QTemporaryDir dir;
  const QString db = dir.filePath(QStringLiteral("history.sqlite"));
  ASSERT_TRUE(window->historyDock()->openDatabase(db));
  QString error;
  ASSERT_TRUE(window->openFile(QStringLiteral(PIPESTUDIO_TEST_DATA "/trace/plan-zb-h1.json"), &error, true));
  const auto plan = window->currentPlan();
  window->pinBaseline();
  ASSERT_EQ(window->baselinePlan(), plan);
  const QStringList traces{kHta + QStringLiteral("rank0.json.gz"), kHta + QStringLiteral("rank1.json.gz")};
  ASSERT_TRUE(window->importTraces(traces, &error)) << error.toStdString();
  // The first run is now on screen; the second import is still compared with the plan.
  ASSERT_NE(window->currentPlan(), plan);
  EXPECT_EQ(window->solvedPlan(), plan);
  ASSERT_TRUE(window->importTraces(traces, &error)) << error.toStdString();
  EXPECT_EQ(window->compareView()->baseline(), plan);
  EXPECT_FALSE(window->compareView()->baseline()->ops.empty());
  // The pinned baseline is what the user pinned.
  EXPECT_EQ(window->baselinePlan(), plan);
  // No 0-op pseudo-plan went into the history: both runs link to plans of the real one's ops.
  auto store = history::HistoryStore::open(db.toStdString());
  ASSERT_THAT(store, HasValue());
  auto runs = store->listRuns();
  ASSERT_TRUE(runs);
  ASSERT_EQ(runs->size(), 2u);
  for (const history::RunSummary& run : *runs) {
    ASSERT_TRUE(run.planId) << run.id;
    auto stored = store->loadPlan(*run.planId);
    ASSERT_THAT(stored, HasValue());
    EXPECT_EQ(stored->ops.size(), plan->ops.size()) << run.id;
  }
  // The compare view names its sides as what they are.
  const viz::CompareModel* model = window->compareView()->model();
  EXPECT_EQ(model->headerData(viz::CompareModel::Baseline, Qt::Horizontal).toString(), QStringLiteral("Plan"));
  EXPECT_EQ(model->headerData(viz::CompareModel::Current, Qt::Horizontal).toString(), QStringLiteral("Measured"));
  const QString summary = window->metricsSummary()->text();
  EXPECT_FALSE(summary.contains(QStringLiteral("0.0 µs"))) << summary.toStdString();
}

TEST_F(TrapsTest, AnImportWithoutASolveOfTheSettingsSaysSoAndStoresNoPlan) {
  QTemporaryDir dir;
  const QString db = dir.filePath(QStringLiteral("history.sqlite"));
  ASSERT_TRUE(window->historyDock()->openDatabase(db));
  openDefault();
  // Settings that fail: the last good plan stays on screen, dimmed, and is not what was run.
  viz::ClusterTableModel* cluster = window->clusterModel();
  ASSERT_TRUE(cluster->setData(cluster->index(0, viz::ClusterTableModel::MemoryGib), QStringLiteral("2")));
  waitForSolve();
  ASSERT_FALSE(window->lastFailure().isEmpty());
  ASSERT_EQ(window->solvedPlan(), nullptr);
  QString error;
  ASSERT_TRUE(window->importTraces({kHta + QStringLiteral("rank0.json.gz")}, &error)) << error.toStdString();
  EXPECT_TRUE(window->statusText().contains(QStringLiteral("not compared"))) << window->statusText().toStdString();
  auto store = history::HistoryStore::open(db.toStdString());
  ASSERT_TRUE(store);
  auto runs = store->listRuns();
  ASSERT_TRUE(runs);
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_FALSE(runs->front().planId.has_value());
}

// --- 3: MoE settings -------------------------------------------------------------------------------

TEST_F(TrapsTest, MoeSettingsAreEditableShownAndNotCarriedToADenseModel) {
  openBundled("qwen3-30b-a3b.json", "h100-4x8-ib.json", qwenConfig());
  const SolverPanel& panel = window->solverPanel();
  EXPECT_TRUE(panel.moeGroup->isEnabled());
  panel.etp->setValue(1);
  EXPECT_EQ(window->undoStack()->undoText(), QStringLiteral("change ETP"));
  panel.dispatcher->setCurrentIndex(2);  // flex · HybridEP
  panel.capacityFactor->setValue(1.25);
  panel.moeA2aOverlap->setChecked(true);
  panel.sharedExpertOverlap->setChecked(true);
  panel.moeCommSms->setValue(24);
  const Parallelism par = window->currentRequest().config.parallel;
  EXPECT_EQ(par.expertTensor, 1);
  EXPECT_TRUE(par.moeFlexDispatcher);
  EXPECT_EQ(par.moeFlexBackend, FlexBackend::HybridEp);
  ASSERT_TRUE(par.moeCapacityFactor);
  EXPECT_DOUBLE_EQ(*par.moeCapacityFactor, 1.25);
  EXPECT_TRUE(par.moeA2aOverlap);
  EXPECT_TRUE(par.moeSharedExpertOverlap);
  EXPECT_EQ(par.moeCommSms, 24);
  // The capacity box steps from "model's" to "dropless" to factors.
  panel.capacityFactor->setValue(-1);
  EXPECT_FALSE(window->currentRequest().config.parallel.moeCapacityFactor);
  EXPECT_EQ(panel.capacityFactor->text(), QStringLiteral("model's"));
  panel.capacityFactor->stepUp();
  EXPECT_EQ(panel.capacityFactor->text(), QStringLiteral("dropless"));
  ASSERT_TRUE(window->currentRequest().config.parallel.moeCapacityFactor);
  EXPECT_EQ(*window->currentRequest().config.parallel.moeCapacityFactor, 0.0);
  panel.capacityFactor->setValue(1.25);
  // Qwen3-30B-A3B has no shared experts: a solve refuses their overlap (checkPlanSettings), and
  // says so.
  waitForSolve();
  EXPECT_FALSE(window->solvedPlan());
  EXPECT_TRUE(window->lastFailure().contains(QStringLiteral("needs shared experts")))
      << window->lastFailure().toStdString();
  panel.sharedExpertOverlap->setChecked(false);
  // Megatron's sync-free MoE and HybridEP's own settings: each box sets its field, each factor's
  // lowest step is "unset".
  EXPECT_EQ(panel.rankBudget->text(), QStringLiteral("none"));
  EXPECT_EQ(panel.stashFactor->text(), QStringLiteral("default"));
  panel.permuteIntoDispatcher->setChecked(true);
  panel.combineChunk->setValue(128);
  panel.rankBudget->setValue(1.5);
  panel.pagedStash->setChecked(true);
  panel.stashFactor->setValue(1.2);
  Parallelism syncFree = window->currentRequest().config.parallel;
  EXPECT_TRUE(syncFree.moePermuteFusionIntoDispatcher);
  EXPECT_EQ(syncFree.moeCombineChunkTokens, 128);
  ASSERT_TRUE(syncFree.moeRankCapacityFactor);
  EXPECT_DOUBLE_EQ(*syncFree.moeRankCapacityFactor, 1.5);
  EXPECT_TRUE(syncFree.moePagedStash);
  EXPECT_DOUBLE_EQ(syncFree.moePagedStashBufferFactor, 1.2);
  EXPECT_EQ(window->undoStack()->undoText(), QStringLiteral("change Stash factor"));
  // A plan or workspace that sets them shows them (the panel keeps nothing it does not show).
  PlanConfig loaded = window->currentRequest().config;
  loaded.parallel.moeRankCapacityFactor = 2.0;
  loaded.parallel.moePagedStashBufferFactor = 0;
  openBundled("qwen3-30b-a3b.json", "h100-4x8-ib.json", loaded);
  EXPECT_DOUBLE_EQ(panel.rankBudget->value(), 2.0);
  EXPECT_EQ(panel.stashFactor->text(), QStringLiteral("default"));
  EXPECT_EQ(window->currentRequest().config.parallel.moePagedStashBufferFactor, 0.0);
  ASSERT_TRUE(window->solvedPlan()) << window->lastFailure().toStdString();
  // The Metrics dock shows them: two plans that differ only there no longer look alike.
  const QString summary = window->metricsSummary()->text();
  for (const char* part : {"EP 8", "ETP 1", "flex (hybridep)", "capacity 1.25", "A2A overlap", "rank budget 2",
                           "paged stash 1.1", "combine chunk 128", "permute in HybridEP"})
    EXPECT_TRUE(summary.contains(QString::fromLatin1(part), Qt::CaseInsensitive)) << part << summary.toStdString();
  // It drops tokens (capacity 1.25) and its HybridEP has a rank budget: nothing waits on the host,
  // so no note. Dropless and without the budget it waits every layer, and the dock says what that
  // leaves out.
  EXPECT_FALSE(summary.contains(QStringLiteral("Note: host time"))) << summary.toStdString();
  loaded.parallel.moeCapacityFactor.reset();
  loaded.parallel.moeRankCapacityFactor.reset();
  loaded.parallel.moePagedStash = false;  // it needs the budget
  openBundled("qwen3-30b-a3b.json", "h100-4x8-ib.json", loaded);
  ASSERT_TRUE(window->solvedPlan()) << window->lastFailure().toStdString();
  EXPECT_TRUE(window->metricsSummary()->text().contains(QStringLiteral("Note: host time is not in this prediction")))
      << window->metricsSummary()->text().toStdString();

  // A dense model opened next: EP and every MoE setting back to their defaults, and said so.
  openModel("llama3-8b.json");
  const PlanConfig dense = window->currentRequest().config;
  Parallelism defaults;
  EXPECT_EQ(dense.parallel.expert, 1);
  EXPECT_EQ(dense.parallel.expertTensor, defaults.expertTensor);
  EXPECT_FALSE(dense.parallel.moeFlexDispatcher);
  EXPECT_FALSE(dense.parallel.moeCapacityFactor);
  EXPECT_FALSE(dense.parallel.moeA2aOverlap);
  EXPECT_FALSE(dense.parallel.moeSharedExpertOverlap);
  EXPECT_EQ(dense.parallel.moeCommSms, 0);
  EXPECT_FALSE(dense.parallel.moeRankCapacityFactor);
  EXPECT_FALSE(dense.parallel.moePagedStash);
  EXPECT_FALSE(dense.parallel.moePermuteFusionIntoDispatcher);
  EXPECT_EQ(dense.parallel.moeCombineChunkTokens, 0);
  EXPECT_EQ(panel.dispatcher->currentIndex(), 0);
  EXPECT_FALSE(panel.moeGroup->isEnabled());
  EXPECT_TRUE(panel.messageText().contains(QStringLiteral("EP 8 → 1"))) << panel.messageText().toStdString();
  EXPECT_FALSE(window->metricsSummary()->text().contains(QStringLiteral("Experts")));
}

// --- 4: the default workspace and the bundled files ------------------------------------------------

TEST_F(TrapsTest, TheDefaultWorkspaceIsTheBundledFilesAndACopyThatDiffersIsMarked) {
  openDefault();
  EXPECT_TRUE(window->bundledDifferences().isEmpty())
      << window->bundledDifferences().join(QStringLiteral("\n")).toStdString();
  // Its plan is the command line's plan of the bundled files, to the digit.
  PlanRequest cli;
  auto model = loadModel(kTrapResources + "/models/stable-diffusion-2.1.json");
  auto cluster = loadCluster(kTrapResources + "/clusters/a100-1x8-nvlink.json");
  ASSERT_TRUE(model && cluster);
  cli.model = *model;
  cli.cluster = *cluster;
  cli.config = window->currentRequest().config;
  auto plan = makePlan(cli);
  ASSERT_THAT(plan, HasValue());
  EXPECT_DOUBLE_EQ(window->currentPlan()->metrics.makespanMs, plan->metrics.makespanMs);

  // A workspace carrying an old copy of the cluster under the file's name: the window says so.
  Workspace stale = bundledWorkspace("gpt3-1.3b.json", "a100-1x8-nvlink.json", cli.config);
  stale.solver.partition = "balanced";
  stale.solver.fill = "none";
  stale.cluster.gpu.efficiency = 0.5;
  window->setWorkspace(stale, QString());
  waitForSolve();
  const QStringList differences = window->bundledDifferences();
  ASSERT_EQ(differences.size(), 1);
  EXPECT_TRUE(differences.front().contains(QStringLiteral("a100-1x8-nvlink.json")))
      << differences.front().toStdString();
  EXPECT_TRUE(differences.front().contains(QStringLiteral("efficiency"))) << differences.front().toStdString();
  EXPECT_TRUE(window->windowTitle().contains(QStringLiteral("(not the bundled file)")))
      << window->windowTitle().toStdString();
  auto* dock = window->findChild<QDockWidget*>(QStringLiteral("ClusterDock"));
  ASSERT_NE(dock, nullptr);
  EXPECT_TRUE(dock->windowTitle().contains(QStringLiteral("not the bundled file")));
  auto* note = window->findChild<QLabel*>(QStringLiteral("ClusterBundledNote"));
  ASSERT_NE(note, nullptr);
  EXPECT_TRUE(note->isVisibleTo(dock));
  const double slow = window->currentPlan()->metrics.makespanMs;
  // "Use the bundled file" puts the file's cluster in its place, and the plan follows it.
  QPushButton* use = nullptr;
  for (auto* button : dock->findChildren<QPushButton*>()) {
    if (button->text() == QStringLiteral("Use the bundled file")) use = button;
  }
  ASSERT_NE(use, nullptr);
  use->click();
  waitForSolve();
  EXPECT_TRUE(window->bundledDifferences().isEmpty());
  EXPECT_FALSE(note->isVisibleTo(dock));
  ASSERT_TRUE(window->currentPlan());
  EXPECT_LT(window->currentPlan()->metrics.makespanMs, slow);
}

// --- 5: Run Locally after a failed solve ----------------------------------------------------------

TEST_F(TrapsTest, RunLocallyRunsOnlyTheSolveOfTheCurrentSettingsAndNamesTheRunAfterIt) {
  if (!window->runLocallyAction()) GTEST_SKIP() << "this build has no executor";
  openDefault();
  QAction* run = window->runLocallyAction();
  EXPECT_TRUE(run->isEnabled());
  RunLocalDialog* dialog = window->openRunLocalDialog();
  ASSERT_NE(dialog, nullptr);
  auto* label = dialog->findChild<QLabel*>(QStringLiteral("RunLocalPlan"));
  ASSERT_NE(label, nullptr);
  // Another model whose settings fail: the dimmed last good plan is the previous model's.
  openModel("gpt3-1.3b.json");
  viz::ClusterTableModel* cluster = window->clusterModel();
  ASSERT_TRUE(cluster->setData(cluster->index(0, viz::ClusterTableModel::MemoryGib), QStringLiteral("1")));
  waitForSolve();
  ASSERT_FALSE(window->lastFailure().isEmpty());
  ASSERT_TRUE(window->currentPlan());  // the last good plan, on screen
  EXPECT_FALSE(run->isEnabled());
  EXPECT_TRUE(run->toolTip().contains(QStringLiteral("solve them first"))) << run->toolTip().toStdString();
  // The open dialog follows: nothing to run, and says why.
  EXPECT_TRUE(label->text().startsWith(QStringLiteral("none"))) << label->text().toStdString();
  dialog->start();
  EXPECT_FALSE(dialog->busy());
  dialog->close();
  // Asked anyway (Ctrl+R, a script), the window refuses with the reason.
  EXPECT_EQ(window->openRunLocalDialog(), nullptr);
  EXPECT_TRUE(window->statusText().contains(QStringLiteral("not solved"))) << window->statusText().toStdString();

  // Solved again: the run is of this plan, named after it.
  window->undoStack()->undo();
  waitForSolve();
  ASSERT_TRUE(window->solvedPlan());
  EXPECT_TRUE(run->isEnabled());
  dialog = window->openRunLocalDialog();
  ASSERT_NE(dialog, nullptr);
  const auto plan = window->solvedPlan();
  EXPECT_TRUE(label->text().startsWith(QString::fromStdString(plan->model.name + " on " + plan->cluster.name)))
      << label->text().toStdString();
  dialog->close();
}

// --- 6: unsaved edits before an open ---------------------------------------------------------------

TEST_F(TrapsTest, OpeningAnotherWorkspaceAsksAboutUnsavedChangesFirst) {
  openDefault();
  QTemporaryDir dir;
  const QString mine = dir.filePath(QStringLiteral("mine.pipestudio"));
  const QString other = dir.filePath(QStringLiteral("other.pipestudio"));
  QString error;
  ASSERT_TRUE(window->saveWorkspaceTo(other, &error)) << error.toStdString();
  ASSERT_TRUE(window->saveWorkspaceTo(mine, &error)) << error.toStdString();
  const SolverPanel& panel = window->solverPanel();
  const int edited = panel.microbatches->value() + 2;
  panel.microbatches->setValue(edited);
  waitForSolve();
  ASSERT_TRUE(window->isModified());

  // Cancel: File > Open, Open Recent and Open Default Workspace all leave the edit in place.
  answer = QMessageBox::Cancel;
  EXPECT_FALSE(window->openFile(other, &error, true));
  EXPECT_TRUE(error.contains(QStringLiteral("cancelled"))) << error.toStdString();
  EXPECT_FALSE(window->openDefaultWorkspace());
  QMenu* recent = nullptr;
  for (QMenu* menu : window->menuBar()->findChildren<QMenu*>()) {
    if (menu->title() == QStringLiteral("Open &Recent")) recent = menu;
  }
  ASSERT_NE(recent, nullptr);
  ASSERT_FALSE(recent->actions().isEmpty());
  recent->actions().front()->trigger();
  EXPECT_EQ(asked, 3);
  EXPECT_TRUE(window->isModified());
  EXPECT_EQ(panel.microbatches->value(), edited);
  EXPECT_EQ(window->workspacePath(), mine);

  // Save: the edit is written to the workspace's file, then the other opens.
  answer = QMessageBox::Save;
  ASSERT_TRUE(window->openFile(other, &error, true)) << error.toStdString();
  waitForSolve();
  EXPECT_EQ(window->workspacePath(), other);
  auto saved = loadWorkspace(mine.toStdString(), solverNames());
  ASSERT_THAT(saved, HasValue());
  EXPECT_EQ(saved->solver.microbatches, edited);
  // Opening a model into the workspace replaces nothing unsaved: not asked.
  panel.microbatches->setValue(edited + 2);
  const int before = asked;
  openModel("gpt3-1.3b.json");
  EXPECT_EQ(asked, before);
}

// --- 7: torchtitan from the window ---------------------------------------------------------------

TEST_F(TrapsTest, TheWindowExportsTorchtitansPythonConfigurationAndTheLegacyToml) {
  PlanConfig c = pipelineConfig("1f1b", 4, 8);
  c.parallel.data = 2;
  openBundled("llama3-8b.json", "a100-1x8-nvlink.json", c);
  ASSERT_TRUE(window->solvedPlan()) << window->lastFailure().toStdString();
  QTemporaryDir dir;
  QString error;
  const QString py = dir.filePath(QStringLiteral("llama_1f1b.py"));
  ASSERT_TRUE(window->exportTo(py, &error)) << error.toStdString();
  QFile config(py);
  ASSERT_TRUE(config.open(QIODevice::ReadOnly));
  const QString text = QString::fromUtf8(config.readAll());
  EXPECT_TRUE(text.contains(QStringLiteral("def pipestudio_plan"))) << text.left(400).toStdString();
  EXPECT_TRUE(QFileInfo::exists(dir.filePath(QStringLiteral("llama_1f1b.csv"))));
  EXPECT_TRUE(window->statusText().contains(QStringLiteral("--module llama_1f1b")))
      << window->statusText().toStdString();
  const QString toml = dir.filePath(QStringLiteral("legacy.toml"));
  ASSERT_TRUE(window->exportTo(toml, &error)) << error.toStdString();
  QFile legacy(toml);
  ASSERT_TRUE(legacy.open(QIODevice::ReadOnly));
  EXPECT_TRUE(QString::fromUtf8(legacy.readAll()).contains(QStringLiteral("[parallelism]")));
  // torchtitan imports the file as a module: a name that is not an identifier is refused.
  EXPECT_FALSE(window->exportTo(dir.filePath(QStringLiteral("my-plan.py")), &error));
  EXPECT_TRUE(error.contains(QStringLiteral("Python identifier"))) << error.toStdString();

  // The dialog's answer: a typed suffix the dialog offers decides, no second extension.
  const std::vector<ExportFormat> titan{ExportFormat::TorchtitanPython, ExportFormat::TorchtitanToml};
  using R = std::pair<QString, ExportFormat>;
  EXPECT_EQ(RunController::resolveExportPath(QStringLiteral("/d/x.py"), ExportFormat::TorchtitanToml, titan),
            R(QStringLiteral("/d/x.py"), ExportFormat::TorchtitanPython));
  EXPECT_EQ(RunController::resolveExportPath(QStringLiteral("/d/x"), ExportFormat::TorchtitanPython, titan),
            R(QStringLiteral("/d/x.py"), ExportFormat::TorchtitanPython));
  EXPECT_EQ(RunController::resolveExportPath(QStringLiteral("/d/x.toml"), ExportFormat::TorchtitanPython, titan),
            R(QStringLiteral("/d/x.toml"), ExportFormat::TorchtitanToml));
  const std::vector<ExportFormat> planJson{ExportFormat::PlanJson};
  EXPECT_EQ(RunController::resolveExportPath(QStringLiteral("/d/test_plan.json"), ExportFormat::PlanJson, planJson),
            R(QStringLiteral("/d/test_plan.json"), ExportFormat::PlanJson));
  EXPECT_EQ(RunController::resolveExportPath(QStringLiteral("/d/test"), ExportFormat::PlanJson, planJson),
            R(QStringLiteral("/d/test.plan.json"), ExportFormat::PlanJson));
  // A plan named x.json from the Plan JSON dialog is a plan, not a Chrome trace.
  ASSERT_TRUE(window->exportAs(ExportFormat::PlanJson, dir.filePath(QStringLiteral("test_plan.json")), &error))
      << error.toStdString();
  auto written = loadPlan(dir.filePath(QStringLiteral("test_plan.json")).toStdString());
  ASSERT_THAT(written, HasValue());
  EXPECT_EQ(written->ops.size(), window->currentPlan()->ops.size());
}

// --- the smaller items ----------------------------------------------------------------------------

TEST_F(TrapsTest, OpeningAModelFitsTheSettingsToItAndSaysWhatChanged) {
  openDefault();  // Stable Diffusion: the diffusionpipe partition with greedy fill
  openModel("llama3-8b.json");
  PlanConfig c = window->currentRequest().config;
  EXPECT_EQ(c.partition, "balanced");
  EXPECT_EQ(c.fill, "none");
  ASSERT_TRUE(window->lastFailure().isEmpty()) << window->lastFailure().toStdString();
  ASSERT_TRUE(window->solvedPlan());
  EXPECT_TRUE(window->solverPanel().messageText().contains(QStringLiteral("Partition diffusionpipe → balanced")))
      << window->solverPanel().messageText().toStdString();
  // TP 8 on a model of 4 KV heads is lowered to what the layers divide.
  PlanConfig tp8 = qwenConfig();
  tp8.parallel.tensor = 8;
  tp8.parallel.data = 1;
  tp8.parallel.expert = 1;
  const ModelSpec qwen = *loadModel(kTrapResources + "/models/qwen3-30b-a3b.json");
  const ClusterSpec h100 = *loadCluster(kTrapResources + "/clusters/h100-4x8-ib.json");
  const FittedSettings fit = fitSettingsToModel(tp8, qwen, h100);
  EXPECT_EQ(fit.config.parallel.tensor, 4);
  EXPECT_TRUE(std::any_of(fit.changes.begin(), fit.changes.end(), [](const QString& change) {
    return change.startsWith(QStringLiteral("TP 8 → 4"));
  })) << fit.changes.join(QStringLiteral("; ")).toStdString();
  EXPECT_TRUE(fit.kept.isEmpty()) << fit.kept.toStdString();
}

TEST_F(TrapsTest, TheChunkCountFollowsAScheduleSwitchInOneUndoStep) {
  PlanConfig c = recomputedPipelineConfig("1f1b", 4, 8);
  openBundled("llama3-8b.json", "a100-1x8-nvlink.json", c);
  const SolverPanel& panel = window->solverPanel();
  ASSERT_EQ(panel.chunks->value(), 1);
  panel.schedule->setCurrentIndex(panel.schedule->findData(QStringLiteral("interleaved-1f1b")));
  EXPECT_EQ(panel.chunks->value(), 2);  // not 1F1B in more memory
  waitForSolve();
  ASSERT_TRUE(window->solvedPlan()) << window->lastFailure().toStdString();
  EXPECT_TRUE(window->solverPanel().messageText().contains(QStringLiteral("Chunks / device 1 → 2")))
      << window->solverPanel().messageText().toStdString();
  // One step: undo restores the schedule and its chunk count, redo both again.
  window->undoStack()->undo();
  EXPECT_EQ(panel.schedule->currentData().toString(), QStringLiteral("1f1b"));
  EXPECT_EQ(panel.chunks->value(), 1);
  window->undoStack()->redo();
  EXPECT_EQ(panel.schedule->currentData().toString(), QStringLiteral("interleaved-1f1b"));
  EXPECT_EQ(panel.chunks->value(), 2);
  panel.schedule->setCurrentIndex(panel.schedule->findData(QStringLiteral("zb-h1")));
  EXPECT_EQ(panel.chunks->value(), 1);  // zb-h1 refuses a second chunk
  waitForSolve();
  EXPECT_TRUE(window->solvedPlan()) << window->lastFailure().toStdString();
}

TEST_F(TrapsTest, MultiLineMessagesAreSummarisedPastTheirColon) {
  EXPECT_EQ(summaryLine(QStringLiteral("does not fit in memory:\n  device 3 over by 2 GiB\n  device 4 over")),
            QStringLiteral("does not fit in memory: device 3 over by 2 GiB …"));
  EXPECT_EQ(summaryLine(QStringLiteral("one line")), QStringLiteral("one line"));
  EXPECT_EQ(summaryLine(QStringLiteral("first\nsecond")), QStringLiteral("first …"));
}

TEST_F(TrapsTest, AModelSwitchLeavesNoStateOfThePreviousModel) {
  openDefault();
  window->pinBaseline();
  ASSERT_TRUE(window->baselinePlan());
  // A failed solve: the memory chart is marked as the last good plan's, like the timeline.
  viz::ClusterTableModel* cluster = window->clusterModel();
  ASSERT_TRUE(cluster->setData(cluster->index(0, viz::ClusterTableModel::MemoryGib), QStringLiteral("2")));
  waitForSolve();
  EXPECT_TRUE(window->memoryBreakdown()->dimmed());
  window->undoStack()->undo();
  waitForSolve();
  EXPECT_FALSE(window->memoryBreakdown()->dimmed());
  // Another model: the baseline of the previous one is let go (no "+187,641,428 %").
  openModel("gpt3-1.3b.json");
  EXPECT_EQ(window->baselinePlan(), nullptr);
  EXPECT_FALSE(window->metricsSummary()->text().contains(QStringLiteral("Δ")));
}

TEST_F(TrapsTest, CompareHeadersNameLayoutRecomputationAndZero) {
  PlanConfig c = pipelineConfig("1f1b", 4, 8);
  c.parallel.tensor = 2;
  c.parallel.recompute = Recompute::Selective;
  openBundled("llama3-8b.json", "a100-1x8-nvlink.json", c);
  window->pinBaseline();
  window->solverPanel().zero->setCurrentIndex(1);
  waitForSolve();
  window->solverPanel().tp->setValue(1);
  waitForSolve();
  window->solverPanel().dp->setValue(2);
  waitForSolve();
  ASSERT_TRUE(window->solvedPlan()) << window->lastFailure().toStdString();
  const QString title = window->compareView()->currentTitle();
  EXPECT_TRUE(title.contains(QStringLiteral("DP 2"))) << title.toStdString();
  EXPECT_TRUE(title.contains(QStringLiteral("recompute selective"))) << title.toStdString();
  EXPECT_TRUE(title.contains(QStringLiteral("ZeRO 1"))) << title.toStdString();
  const viz::CompareModel* model = window->compareView()->model();
  EXPECT_EQ(model->headerData(viz::CompareModel::Baseline, Qt::Horizontal).toString(), QStringLiteral("Baseline"));
}

TEST_F(TrapsTest, ChunkShadesBeyondFourNameEveryChunkTheyStandFor) {
  PlanConfig c = pipelineConfig("interleaved-1f1b", 4, 8, 6);
  openBundled("llama3-8b.json", "a100-1x8-nvlink.json", c);
  ASSERT_TRUE(window->solvedPlan()) << window->lastFailure().toStdString();
  const QStringList legend = window->timelineView()->legend()->entryNames();
  EXPECT_TRUE(legend.contains(QStringLiteral("F chunk 0, 4"))) << legend.join(QStringLiteral(", ")).toStdString();
  EXPECT_TRUE(legend.contains(QStringLiteral("F chunk 1, 5")));
  EXPECT_TRUE(legend.contains(QStringLiteral("F chunk 3")));
}

}  // namespace
}  // namespace pipestudio::gui
