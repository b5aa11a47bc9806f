#pragma once
// History browser (docs/architecture.md, §7): the runs of the SQLite history as a sortable, filterable
// table; open a run in the timeline, compare it with its plan or with another run, rename,
// annotate, delete. Runs recorded by other processes (pipestudio-cli run, a deploy) appear on
// their own: the database file is watched, with a slow poll as a fallback (WAL writes do not
// always touch the main file). With no runs, the dock says how to get one. Listing runs and
// building a run's plan (runAsPlan) read the database on JobTracker workers through a read-only
// connection of their own, so a large history never freezes the window.

#include <QAbstractTableModel>
#include <QWidget>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "JobTracker.hpp"
#include "MeasuredRunReader.hpp"
#include "pipestudio/history/HistoryStore.hpp"

class QSortFilterProxyModel;
class QTableView;
class QLineEdit;
class QLabel;
class QFileSystemWatcher;
class QTimer;

namespace pipestudio::gui {

class HistoryModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Id, Name, Status, Created, Backend, Devices, Iterations, DurationMs, Events, Notes, ColumnCount };
  explicit HistoryModel(QObject* parent = nullptr);
  void setRuns(std::vector<history::RunSummary> runs);
  const history::RunSummary& run(int row) const { return m_runs[static_cast<std::size_t>(row)]; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::vector<history::RunSummary> m_runs;
};

class HistoryDock : public QWidget {
  Q_OBJECT
 public:
  explicit HistoryDock(QWidget* parent = nullptr);
  ~HistoryDock() override;

  /// Opens the database at `path` (created when missing). Errors are shown in the dock (and
  /// written to `error`).
  bool openDatabase(const QString& path, QString* error = nullptr);
  /// Re-reads the runs (keeps the selection); cheap when nothing changed.
  /// Re-lists the runs off the GUI thread; the table changes when the listing arrives.
  void refresh();
  /// Processes events until the listing and any run being opened have arrived (tests).
  bool waitForIdle(int timeoutMs) const;
  /// The empty-state hint (visible when the database holds no runs).
  QLabel* emptyHint() const { return m_empty; }
  HistoryModel* model() const { return m_model; }
  QSortFilterProxyModel* proxy() const { return m_proxy; }
  QTableView* view() const { return m_view; }
  history::HistoryStore* store() const { return m_store.get(); }
  /// Selected run ids (in view order).
  std::vector<history::RunId> selectedRuns() const;
  /// Reads run `id` as a drawable plan (its first iteration) on a worker, then calls `done` on
  /// the GUI thread; an error goes to message(). A newer read supersedes an older one;
  /// waitForIdle() waits for it.
  void readRunPlan(history::RunId id, std::function<void(std::shared_ptr<const Plan>)> done);
  /// Reads run `id` as the window shows it against its plan (MeasuredRunReader.hpp) on a worker,
  /// then calls `done` on the GUI thread; errors go to message().
  void readMeasuredRun(history::RunId id, std::function<void(MeasuredRunView)> done);

 Q_SIGNALS:
  /// Open: the selected run in the timeline (op ranges, or its GPU activity).
  void openRunRequested(const pipestudio::gui::MeasuredRunView& run);
  /// Compare with plan: the selected run against the plan it ran.
  void runAgainstPlanRequested(const pipestudio::gui::MeasuredRunView& run);
  void compareRequested(std::shared_ptr<const pipestudio::Plan> baseline,
                        std::shared_ptr<const pipestudio::Plan> current);
  /// The number of runs changed (a run was added or deleted).
  void runsChanged(int runs);
  void message(const QString& text, bool error);

 private:
  void openSelected();
  void compareSelected();
  /// Compares the selected run with the plan it executed (public: the window's menu uses it).
 public:
  void compareWithPlan();

 private:
  void renameSelected();
  void annotateSelected();
  void deleteSelected();
  void showRuns(Expected<std::vector<history::RunSummary>> runs);
  /// Runs `read(store)` on a worker with its own connection to this dock's database, then
  /// `done(result)` here; a newer Open/Compare supersedes an older one.
  template <typename Read, typename Done>
  void readRunsInBackground(Read read, Done done);

  std::unique_ptr<history::HistoryStore> m_store;
  HistoryModel* m_model = nullptr;
  QSortFilterProxyModel* m_proxy = nullptr;
  QTableView* m_view = nullptr;
  QLineEdit* m_filter = nullptr;
  QLabel* m_status = nullptr;
  QLabel* m_empty = nullptr;
  QFileSystemWatcher* m_watcher = nullptr;
  QTimer* m_poll = nullptr;
  QString m_signature;  ///< ids, statuses and event counts of the listed runs
  QString m_fileStamp;  ///< sizes and times of the database and its log at the last poll
  /// The workers' read-only connection, opened once per database (opening one per job would
  /// touch the watched folder and start another refresh). One worker uses it at a time.
  struct Reader {
    std::mutex mutex;
    std::unique_ptr<history::HistoryStore> store;
  };
  std::shared_ptr<Reader> m_reader;
  JobTracker m_listJob{this, 1};  ///< listRuns for the table
  JobTracker m_readJob{this, 1};  ///< runAsPlan and friends for Open / Compare
};

}  // namespace pipestudio::gui
