#include "RunController.hpp"

#include <QFileDialog>
#include <QFileInfo>
#include <QMessageBox>
#include <optional>

#include "MainWindowInterface.hpp"
#ifdef PIPESTUDIO_HAVE_REMOTE
#include "DeployDialog.hpp"
#endif
#ifdef PIPESTUDIO_HAVE_HISTORY
#include "HistoryDock.hpp"
#include "MeasuredRunReader.hpp"
#include "pipestudio/history/TraceImport.hpp"
#endif
#ifdef PIPESTUDIO_HAVE_LOCAL_RUN
#include "RunLocalDialog.hpp"
#endif
#include "pipestudio/common/Files.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/viz/TimelineView.hpp"

namespace pipestudio::gui {

namespace {
QString q(const std::string& s) { return QString::fromStdString(s); }
}  // namespace

RunController::RunController(QWidget* window, MainWindowInterface& host, viz::TimelineView* timeline,
                             std::function<QString()> workspaceName)
    : QObject(window),
      m_window(window),
      m_host(host),
      m_timeline(timeline),
      m_workspaceName(std::move(workspaceName)) {}

RunController::~RunController() = default;

QString RunController::runName(const QString& separator) const {
  const QString schedule = q(m_host.currentPlan()->config.schedule);
  const QString workspace = m_workspaceName();
  return workspace.isEmpty() ? schedule : workspace + separator + schedule;
}

// --- exports --------------------------------------------------------------------------------

bool RunController::exportPlanJson(const QString& path, QString* error) {
  const auto plan = m_host.currentPlan();
  if (!plan) {
    if (error) *error = QStringLiteral("Nothing to export: solve or open a plan first");
    m_host.setStatus(QStringLiteral("Nothing to export: solve or open a plan first"), true);
    return false;
  }
  if (Status s = savePlan(path.toStdString(), *plan); !s) {
    if (error) *error = q(s.message());
    m_host.setStatus(q(s.message()), true);
    return false;
  }
  m_host.setStatus(QStringLiteral("Exported %1 (run it with pipestudio-cli run)").arg(path));
  return true;
}

bool RunController::exportTo(const QString& path, QString* error) {
  auto fail = [&](const QString& message) {
    if (error) *error = message;
    m_host.setStatus(message, true);
    return false;
  };
  const auto plan = m_host.currentPlan();
  if (!plan) return fail(QStringLiteral("Nothing to export: solve or open a plan first"));
  const QString lower = path.toLower();
  if (lower.endsWith(QStringLiteral(".plan.json"))) return exportPlanJson(path, error);
  if (lower.endsWith(QStringLiteral(".json"))) {
    ChromeTraceOptions options;
    options.title = plan->config.schedule;
    if (Status s = writeChromeTrace(path.toStdString(), *plan, options); !s) return fail(q(s.message()));
  } else if (lower.endsWith(QStringLiteral(".csv"))) {
    if (Status s = writeScheduleCsv(path.toStdString(), *plan); !s) return fail(q(s.message()));
  } else if (lower.endsWith(QStringLiteral(".sh"))) {
    auto m = megatronExport(*plan);
    if (!m) return fail(q("Megatron-LM cannot express this plan: " + m.message()));
    if (Status s = writeOutputFile(path.toStdString(), m->text); !s) return fail(q(s.message()));
  } else if (lower.endsWith(QStringLiteral(".toml"))) {
    const QFileInfo info(path);
    const std::string csvPath =
        QString(info.path() + QLatin1Char('/') + info.completeBaseName() + QStringLiteral(".csv")).toStdString();
    auto t = torchtitanExport(*plan, csvPath);
    if (!t) return fail(q("torchtitan cannot express this plan: " + t.message()));
    if (Status s = writeOutputFiles({{csvPath, t->csv}, {path.toStdString(), t->toml}}); !s)
      return fail(q(s.message()));
  } else if (lower.endsWith(QStringLiteral(".png")) || lower.endsWith(QStringLiteral(".svg")) ||
             lower.endsWith(QStringLiteral(".pdf"))) {
    if (!m_timeline->exportImage(path, 1600, 900, true)) return fail(QStringLiteral("Could not write %1").arg(path));
  } else {
    return fail(
        QStringLiteral("%1: unknown export format (expected .png, .svg, .pdf, .plan.json, .json, .csv, .sh or .toml)")
            .arg(path));
  }
  m_host.setStatus(QStringLiteral("Exported %1").arg(path));
  return true;
}

void RunController::exportDialog(const QString& filter, const QString& suffix) {
  QString path = QFileDialog::getSaveFileName(m_window, QStringLiteral("Export"), QString(), filter);
  if (path.isEmpty()) return;
  if (!path.toLower().endsWith(suffix)) path += suffix;
  QString error;
  if (!exportTo(path, &error)) QMessageBox::warning(m_window, QStringLiteral("Export failed"), error);
}

// --- trace import ---------------------------------------------------------------------------

#ifdef PIPESTUDIO_HAVE_HISTORY
/// What File > Import Trace produced: the run and, when it matched the plan op by op, the
/// measured run as a plan to draw under it.
struct TraceImportOutcome {
  history::TraceImportResult result;
  std::optional<MeasuredRunView> run;  ///< the run as the window shows it
};

namespace {

/// The import itself, free of widgets: runs on the GUI thread (importTraces) or a worker.
Expected<TraceImportOutcome> importTraceFiles(history::HistoryStore& store, const QStringList& files,
                                              const std::shared_ptr<const Plan>& plan) {
  std::vector<std::string> paths;
  for (const QString& f : files) paths.push_back(f.toStdString());
  history::TraceImportOptions options;
  if (plan) options.plan = plan.get();
  auto result = history::importTraces(store, paths, options);
  if (!result) return result.error();
  TraceImportOutcome out{*result, std::nullopt};
  if (plan) {
    if (auto id = store.addPlan(*plan, "workspace plan")) (void)store.linkRunToPlan(result->runId, *id);
  }
  if (auto run = readMeasuredRun(store, result->runId)) {
    out.run = std::move(*run);
    if (plan) out.run->plan = plan;  // the window's plan itself
  }
  return out;
}

}  // namespace

void RunController::showRunAgainst(history::RunId run, std::shared_ptr<const Plan> plan) {
  m_host.historyDock()->readMeasuredRun(run, [this, plan = std::move(plan)](MeasuredRunView view) {
    // The plan as the window holds it (the one that ran), not the history's copy of it.
    if (plan) view.plan = plan;
    m_host.showRunAgainstPlan(view);
  });
}

QString RunController::historyPath() const {
  HistoryDock* history = m_host.historyDock();
  return history && history->store() ? q(history->store()->path()) : q(history::defaultHistoryPath());
}

void RunController::showImportedTrace(const TraceImportOutcome& outcome) {
  m_host.historyDock()->refresh();
  if (outcome.run) {
    const MeasuredRunView& run = *outcome.run;
    // A trace without op ranges (a plain profiler trace): its GPU activity in the timeline.
    if (run.measured->ops.empty()) {
      m_host.showMeasuredInTimeline(run.measured, QStringLiteral("imported run %1").arg(run.id), run.run.activity);
    }
    // The measured run drawn under the plan it executed (the compare view's lanes, one axis).
    if (run.plan && (outcome.result.matchedOps > 0 || run.measured->ops.empty())) m_host.showRunAgainstPlan(run);
  }
  m_host.setStatus(QStringLiteral("Imported run %1: %2 events, %3 ops matched to the plan")
                       .arg(outcome.result.runId)
                       .arg(outcome.result.events)
                       .arg(outcome.result.matchedOps));
}

bool RunController::importTraces(const QStringList& files, QString* error) {
  auto fail = [&](const QString& message) {
    if (error) *error = message;
    m_host.setStatus(message, true);
    return false;
  };
  HistoryDock* history = m_host.historyDock();
  if (!history || !history->store()) return fail(QStringLiteral("No history database is open"));
  auto outcome = importTraceFiles(*history->store(), files, m_host.currentPlan());
  if (!outcome) return fail(q(outcome.message()));
  showImportedTrace(*outcome);
  return true;
}

void RunController::importTraceDialog() {
  const QStringList files = QFileDialog::getOpenFileNames(
      m_window, QStringLiteral("Import Trace (one file per rank)"), QString(),
      QStringLiteral("Profiler traces (*.json *.json.gz *.sqlite *.pstrace);;All files (*)"));
  if (files.isEmpty()) return;
  HistoryDock* history = m_host.historyDock();
  if (!history || !history->store()) {
    QMessageBox::warning(m_window, QStringLiteral("Import failed"), QStringLiteral("No history database is open"));
    return;
  }
  m_host.setStatus(QStringLiteral("Importing %1 trace file(s)…").arg(files.size()));
  // A worker with its own connection: large traces take seconds to parse and store.
  m_importJob.start(
      [path = history->store()->path(), files,
       plan = m_host.currentPlan()](const JobTracker::Control&) -> Expected<TraceImportOutcome> {
        auto store = history::HistoryStore::open(path);
        if (!store) return store.error();
        return importTraceFiles(*store, files, plan);
      },
      [this](const Expected<TraceImportOutcome>& outcome) {
        if (!outcome) {
          m_host.setStatus(q(outcome.message()), true);
          QMessageBox::warning(m_window, QStringLiteral("Import failed"), q(outcome.message()));
          return;
        }
        showImportedTrace(*outcome);
      });
}
#endif

// --- runs ---------------------------------------------------------------------------------

RunLocalDialog* RunController::openRunLocalDialog() {
#ifdef PIPESTUDIO_HAVE_LOCAL_RUN
  const auto plan = m_host.currentPlan();
  if (!plan) {
    m_host.setStatus(QStringLiteral("Run locally: no plan (solve first)"), true);
    return nullptr;
  }
  m_host.ensureHistoryOpen();
  HistoryDock* history = m_host.historyDock();
  if (!m_runDialog) {
    m_runDialog = new RunLocalDialog(m_window);
    connect(m_runDialog, &RunLocalDialog::runRecorded, this,
            [this, history](history::RunId run, bool complete, std::shared_ptr<const Plan> ran) {
              history->refresh();
              m_host.setStatus(QStringLiteral("Run %1 recorded in the history%2")
                                   .arg(run)
                                   .arg(complete ? QString() : QStringLiteral(" (not complete)")),
                               !complete);
              // A finished run opens against the plan it ran (the compare view), read off the
              // GUI thread.
              if (complete) showRunAgainst(run, ran);
            });
    connect(m_runDialog, &RunLocalDialog::openRunRequested, this,
            [this](history::RunId run, std::shared_ptr<const Plan> ran) { showRunAgainst(run, std::move(ran)); });
  }
  if (!m_runDialog->busy()) m_runDialog->setPlan(plan, runName(QStringLiteral(" · ")), historyPath());
  m_runDialog->show();
  m_runDialog->raise();
  return m_runDialog;
#else
  m_host.setStatus(QStringLiteral("Run locally: this build has no executor or history"), true);
  return nullptr;
#endif
}

void RunController::openDeployDialog() {
#ifdef PIPESTUDIO_HAVE_REMOTE
  const auto plan = m_host.currentPlan();
  if (!plan) {
    m_host.setStatus(QStringLiteral("Deploy: no plan (solve first)"), true);
    return;
  }
  // The run goes into the database the history dock shows (the default one until opened).
  const QString database = historyPath();
  auto* dialog = new DeployDialog(plan, runName(QStringLiteral("-")), database, m_window);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  HistoryDock* history = m_host.historyDock();
  connect(dialog, &DeployDialog::runRecorded, this, [this, history, database](history::RunId run) {
    if (history->store() == nullptr) {
      history->openDatabase(database);
    } else {
      history->refresh();
    }
    m_host.setStatus(QStringLiteral("Deployed run %1 recorded in the history").arg(run));
  });
  connect(dialog, &DeployDialog::openRunRequested, this, [this, history, plan, database](history::RunId run) {
    if (history->store() == nullptr) history->openDatabase(database);
    // The measured run against the plan it executed (issue 8: the finished run opens in the
    // compare view against its plan), read off the GUI thread.
    showRunAgainst(run, plan);
  });
  dialog->show();
#else
  m_host.setStatus(QStringLiteral("Deploy: this build has no SSH support (core/remote)"), true);
#endif
}

}  // namespace pipestudio::gui
