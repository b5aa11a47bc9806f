#include "RunController.hpp"

#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QMessageBox>
#include <QRegularExpression>
#include <QSettings>
#include <algorithm>
#include <array>
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
#include "pipestudio/common/Try.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/viz/TimelineView.hpp"

namespace pipestudio::gui {

namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }

struct ExportFormatInfo {
  ExportFormat format;
  const char* suffix;
  const char* filter;
};
// Longer suffixes first: ".plan.json" is a plan, any other ".json" a Chrome trace.
constexpr std::array<ExportFormatInfo, 9> kExportFormats{{
    {ExportFormat::PlanJson, ".plan.json", "PipeStudio plan (*.plan.json)"},
    {ExportFormat::Png, ".png", "PNG image (*.png)"},
    {ExportFormat::Svg, ".svg", "SVG image (*.svg)"},
    {ExportFormat::Pdf, ".pdf", "PDF document (*.pdf)"},
    {ExportFormat::ChromeTrace, ".json", "Chrome trace (*.json)"},
    {ExportFormat::ScheduleCsv, ".csv", "Schedule CSV (*.csv)"},
    {ExportFormat::Megatron, ".sh", "Megatron-LM arguments (*.sh)"},
    {ExportFormat::TorchtitanPython, ".py", "torchtitan configuration, Python (torchtitan main) (*.py)"},
    {ExportFormat::TorchtitanToml, ".toml", "torchtitan job config, TOML (v0.2.2 and earlier) (*.toml)"},
}};

const ExportFormatInfo& infoOf(ExportFormat format) {
  return *std::find_if(kExportFormats.begin(), kExportFormats.end(),
                       [format](const ExportFormatInfo& i) { return i.format == format; });
}

/// "GPT-3 1.3B" + "zb-h1" → "gpt_3_1_3b_zb_h1": a file stem that is also a Python module name.
QString exportStem(const Plan& plan) {
  QString stem = q(plan.model.name + " " + plan.config.schedule).toLower();
  static const QRegularExpression other(QStringLiteral("[^a-z0-9]+"));
  stem.replace(other, QStringLiteral("_"));
  while (stem.startsWith(QLatin1Char('_'))) stem.remove(0, 1);
  while (stem.endsWith(QLatin1Char('_'))) stem.chop(1);
  if (stem.isEmpty() || stem.front().isDigit()) stem.prepend(QStringLiteral("plan_"));
  return stem;
}

}  // namespace

std::optional<ExportFormat> exportFormatOfPath(const QString& path) {
  const QString lower = path.toLower();
  for (const ExportFormatInfo& i : kExportFormats) {
    if (lower.endsWith(QLatin1String(i.suffix))) return i.format;
  }
  return std::nullopt;
}

QString exportSuffix(ExportFormat format) { return QString::fromLatin1(infoOf(format).suffix); }

RunController::RunController(QWidget* window, MainWindowInterface& host, viz::TimelineView* timeline,
                             std::function<QString()> userWorkspaceName, std::function<QString()> workspacePath)
    : QObject(window),
      m_window(window),
      m_host(host),
      m_timeline(timeline),
      m_userWorkspaceName(std::move(userWorkspaceName)),
      m_workspacePath(std::move(workspacePath)) {}

RunController::~RunController() = default;

QString RunController::runName(const Plan& plan, const QString& separator) const {
  // The plan's own model and cluster, so a run is never named after something it did not run;
  // a name the user gave the workspace instead, when the plan is the solve of its settings.
  QString name = m_userWorkspaceName();
  if (name.isEmpty() || m_host.solvedPlan().get() != &plan) {
    name = q(plan.model.name);
    if (!plan.cluster.name.empty())
      name += (name.isEmpty() ? QString() : QStringLiteral(" on ")) + q(plan.cluster.name);
  }
  const QString schedule = q(plan.config.schedule);
  return name.isEmpty() ? schedule : name + separator + schedule;
}

// --- exports --------------------------------------------------------------------------------

bool RunController::exportPlanJson(const QString& path, QString* error) {
  return exportAs(ExportFormat::PlanJson, path, error);
}

bool RunController::exportTo(const QString& path, QString* error) {
  const auto format = exportFormatOfPath(path);
  if (format) return exportAs(*format, path, error);
  const QString message =
      QStringLiteral(
          "%1: unknown export format (expected .png, .svg, .pdf, .plan.json, .json, .csv, .sh, .py or .toml)")
          .arg(path);
  if (error) *error = message;
  m_host.setStatus(message, true);
  return false;
}

bool RunController::exportAs(ExportFormat format, const QString& path, QString* error) {
  auto fail = [&](const QString& message) {
    if (error) *error = message;
    m_host.setStatus(message, true);
    return false;
  };
  const auto plan = m_host.currentPlan();
  if (!plan) return fail(QStringLiteral("Nothing to export: solve or open a plan first"));
  QString done = QStringLiteral("Exported %1").arg(path);
  switch (format) {
    case ExportFormat::PlanJson:
      if (Status s = savePlan(path.toStdString(), *plan); !s) return fail(q(s.message()));
      done += QStringLiteral(" (run it with pipestudio-cli run)");
      break;
    case ExportFormat::ChromeTrace: {
      ChromeTraceOptions options;
      options.title = plan->config.schedule;
      if (Status s = writeChromeTrace(path.toStdString(), *plan, options); !s) return fail(q(s.message()));
      break;
    }
    case ExportFormat::ScheduleCsv:
      if (Status s = writeScheduleCsv(path.toStdString(), *plan); !s) return fail(q(s.message()));
      break;
    case ExportFormat::Megatron: {
      auto m = megatronExport(*plan);
      if (!m) return fail(q("Megatron-LM cannot express this plan: " + m.message()));
      if (Status s = writeOutputFile(path.toStdString(), m->text); !s) return fail(q(s.message()));
      break;
    }
    case ExportFormat::TorchtitanPython:
    case ExportFormat::TorchtitanToml: {
      // The configuration names the schedule CSV written beside it (FILE.py → FILE.csv), as
      // `pipestudio-cli export --format torchtitan -o FILE.py` does.
      const QFileInfo info(path);
      TorchtitanOptions titan;
      titan.format = format == ExportFormat::TorchtitanPython ? TorchtitanFormat::Python : TorchtitanFormat::Toml;
      titan.csvPath =
          QString(info.path() + QLatin1Char('/') + info.completeBaseName() + QStringLiteral(".csv")).toStdString();
      titan.moduleName = info.completeBaseName().toStdString();
      if (titan.format == TorchtitanFormat::Python && !isPythonIdentifier(titan.moduleName)) {
        return fail(QStringLiteral("%1: torchtitan imports the configuration as module '%2', which is not a Python "
                                   "identifier (expected a name such as plan_zb.py)")
                        .arg(path, info.completeBaseName()));
      }
      auto t = torchtitanExport(*plan, titan);
      if (!t) return fail(q("torchtitan cannot express this plan: " + t.message()));
      // Both files or neither (writeOutputFiles).
      if (Status s = writeOutputFiles({{titan.csvPath, t->csv}, {path.toStdString(), t->config}}); !s) {
        return fail(q(s.message()));
      }
      done = QStringLiteral("Exported %1 (%2) and %3")
                 .arg(path,
                      titan.format == TorchtitanFormat::Python
                          ? QStringLiteral("torchtitan: --module %1 --config pipestudio_plan").arg(q(titan.moduleName))
                          : QStringLiteral("torchtitan v0.2.2 TOML"),
                      q(titan.csvPath));
      for (const std::string& note : t->notes) done += QStringLiteral("; note: ") + q(note);
      break;
    }
    case ExportFormat::Png:
    case ExportFormat::Svg:
    case ExportFormat::Pdf:
      if (!m_timeline->exportImage(path, 1600, 900, true)) return fail(QStringLiteral("Could not write %1").arg(path));
      break;
  }
  m_host.setStatus(done);
  return true;
}

std::pair<QString, ExportFormat> RunController::resolveExportPath(const QString& path, ExportFormat filterFormat,
                                                                  const std::vector<ExportFormat>& formats) {
  // A suffix the user typed that this dialog offers decides (x.py in the torchtitan dialog is
  // Python whatever filter is chosen); a plan may also be called x.json. Anything else gets the
  // chosen filter's suffix: never x.py.toml, never test_plan.json.plan.json.
  const QString lower = path.toLower();
  for (const ExportFormat f : formats) {
    if (lower.endsWith(exportSuffix(f))) return {path, f};
  }
  if (filterFormat == ExportFormat::PlanJson && lower.endsWith(QStringLiteral(".json"))) return {path, filterFormat};
  return {path + exportSuffix(filterFormat), filterFormat};
}

QString RunController::exportFolder() const {
  QString last = QSettings().value(QStringLiteral("export/lastFolder")).toString();
  if (!last.isEmpty() && QFileInfo(last).isDir()) return last;
  const QString workspace = m_workspacePath();
  if (!workspace.isEmpty() && QFileInfo(workspace).absoluteDir().exists()) return QFileInfo(workspace).absolutePath();
  return QDir::homePath();
}

void RunController::exportDialog(const std::vector<ExportFormat>& formats) {
  const auto plan = m_host.currentPlan();
  if (!plan || formats.empty()) {
    m_host.setStatus(QStringLiteral("Nothing to export: solve or open a plan first"), true);
    return;
  }
  QStringList filters;
  for (const ExportFormat f : formats) filters << QString::fromLatin1(infoOf(f).filter);
  QString selected = filters.front();
  const QString start = exportFolder() + QLatin1Char('/') + exportStem(*plan) + exportSuffix(formats.front());
  const QString answer = QFileDialog::getSaveFileName(m_window, QStringLiteral("Export"), start,
                                                      filters.join(QStringLiteral(";;")), &selected);
  if (answer.isEmpty()) return;
  const auto filterFormat = formats[static_cast<std::size_t>(std::max<qsizetype>(0, filters.indexOf(selected)))];
  const auto [path, format] = resolveExportPath(answer, filterFormat, formats);
  QSettings().setValue(QStringLiteral("export/lastFolder"), QFileInfo(path).absolutePath());
  // The dialog asked about the name it was given; a suffix added, or the schedule CSV a
  // torchtitan configuration puts beside itself, is asked about here.
  QStringList existing;
  if (path != answer && QFileInfo::exists(path)) existing << path;
  if (format == ExportFormat::TorchtitanPython || format == ExportFormat::TorchtitanToml) {
    const QFileInfo info(path);
    const QString csv = info.path() + QLatin1Char('/') + info.completeBaseName() + QStringLiteral(".csv");
    if (QFileInfo::exists(csv)) existing << csv;
  }
  if (!existing.isEmpty() &&
      QMessageBox::question(m_window, QStringLiteral("Export"),
                            QStringLiteral("%1 exists. Replace it?").arg(existing.join(QStringLiteral(" and ")))) !=
          QMessageBox::Yes) {
    return;
  }
  QString error;
  if (!exportAs(format, path, &error)) QMessageBox::warning(m_window, QStringLiteral("Export failed"), error);
}

// --- trace import ---------------------------------------------------------------------------

#ifdef PIPESTUDIO_HAVE_HISTORY
/// What File > Import Trace produced: the run and, when it matched the plan op by op, the
/// measured run as a plan to draw under it.
struct TraceImportOutcome {
  history::TraceImportResult result;
  std::optional<MeasuredRunView> run;  ///< the run as the window shows it
  bool compared = false;               ///< aligned with (and linked to) the solve of the settings
};

namespace {

/// The import itself, free of widgets: runs on the GUI thread (importTraces) or a worker.
Expected<TraceImportOutcome> importTraceFiles(history::HistoryStore& store, const QStringList& files,
                                              const std::shared_ptr<const Plan>& plan) {
  std::vector<std::string> paths;
  for (const QString& f : files) paths.push_back(f.toStdString());
  history::TraceImportOptions options;
  if (plan) options.plan = plan.get();
  PS_ASSIGN_OR_RETURN(auto result, history::importTraces(store, paths, options));
  TraceImportOutcome out{result, std::nullopt, plan != nullptr};
  if (plan) {
    if (auto id = store.addPlan(*plan, "workspace plan")) (void)store.linkRunToPlan(result.runId, *id);
  }
  if (auto run = readMeasuredRun(store, result.runId)) {
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
  if (!outcome.compared) {
    m_host.setStatus(QStringLiteral("Imported run %1: %2 events, not compared with a plan: the current "
                                    "settings are not solved (solve them, then import again to compare)")
                         .arg(outcome.result.runId)
                         .arg(outcome.result.events));
    return;
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
  // The history opens on demand: an import is often the first thing a new session does.
  QString why;
  if (!m_host.ensureHistoryOpen(&why)) return fail(why);
  auto outcome = importTraceFiles(*m_host.historyDock()->store(), files, m_host.solvedPlan());
  if (!outcome) return fail(q(outcome.message()));
  showImportedTrace(*outcome);
  return true;
}

void RunController::importTraceDialog() {
  const QString folder = QSettings().value(QStringLiteral("import/lastFolder")).toString();
  const QStringList files = QFileDialog::getOpenFileNames(
      m_window, QStringLiteral("Import Trace (one file per rank)"), folder,
      QStringLiteral("Profiler traces (*.json *.json.gz *.sqlite *.pstrace);;All files (*)"));
  if (files.isEmpty()) return;
  QSettings().setValue(QStringLiteral("import/lastFolder"), QFileInfo(files.front()).absolutePath());
  QString why;
  if (!m_host.ensureHistoryOpen(&why)) {
    m_host.setStatus(why, true);
    QMessageBox::warning(m_window, QStringLiteral("Import failed"), why);
    return;
  }
  HistoryDock* history = m_host.historyDock();
  m_host.setStatus(QStringLiteral("Importing %1 trace file(s)…").arg(files.size()));
  // A worker with its own connection: large traces take seconds to parse and store.
  m_importJob.start(
      [path = history->store()->path(), files,
       plan = m_host.solvedPlan()](const JobTracker::Control&) -> Expected<TraceImportOutcome> {
        PS_ASSIGN_OR_RETURN(auto store, history::HistoryStore::open(path));
        return importTraceFiles(store, files, plan);
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

void RunController::solvedPlanChanged() {
#ifdef PIPESTUDIO_HAVE_LOCAL_RUN
  if (!m_runDialog || m_runDialog->busy()) return;
  if (const auto plan = m_host.solvedPlan()) {
    m_runDialog->setPlan(plan, runName(*plan, QStringLiteral(" · ")), historyPath());
  } else {
    m_runDialog->setNoPlan(QStringLiteral("the current settings are not solved (solve them to run)"));
  }
#endif
}

RunLocalDialog* RunController::openRunLocalDialog() {
#ifdef PIPESTUDIO_HAVE_LOCAL_RUN
  // The solve of the current settings, never the dimmed last good plan of other settings or a
  // measured run: a run is recorded under the name of what it ran.
  const auto plan = m_host.solvedPlan();
  if (!plan) {
    m_host.setStatus(QStringLiteral("Run locally: the current settings are not solved (solve them first: the plan "
                                    "on screen, if any, is not of these settings)"),
                     true);
    return nullptr;
  }
  QString why;
  if (!m_host.ensureHistoryOpen(&why)) {
    m_host.setStatus(QStringLiteral("Run locally: ") + why, true);
    return nullptr;
  }
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
              if (complete) showRunAgainst(run, std::move(ran));
            });
    connect(m_runDialog, &RunLocalDialog::openRunRequested, this,
            [this](history::RunId run, std::shared_ptr<const Plan> ran) { showRunAgainst(run, std::move(ran)); });
  }
  if (!m_runDialog->busy()) m_runDialog->setPlan(plan, runName(*plan, QStringLiteral(" · ")), historyPath());
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
  const auto plan = m_host.solvedPlan();
  if (!plan) {
    m_host.setStatus(QStringLiteral("Deploy: the current settings are not solved (solve them first)"), true);
    return;
  }
  // The run goes into the database the history dock shows (the default one until opened).
  const QString database = historyPath();
  auto* dialog = new DeployDialog(plan, runName(*plan, QStringLiteral("-")), database, m_window);
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
