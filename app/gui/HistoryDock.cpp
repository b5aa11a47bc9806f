#include "HistoryDock.hpp"

#include <QDateTime>
#include <QFileInfo>
#include <QFileSystemWatcher>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>
#include <array>
#include <type_traits>
#include <utility>

#include "pipestudio/common/Try.hpp"
#include "pipestudio/common/Units.hpp"

namespace pipestudio::gui {

namespace {
/// A cell of this flat table (quietly false for the invalid indexes views and testers probe).
bool isCell(const QAbstractItemModel* model, const QModelIndex& index) {
  return index.isValid() && index.model() == model && !index.parent().isValid() && index.row() < model->rowCount() &&
         index.column() < model->columnCount();
}

QString q(const std::string& s) { return QString::fromStdString(s); }
}  // namespace

HistoryModel::HistoryModel(QObject* parent) : QAbstractTableModel(parent) {}

void HistoryModel::setRuns(std::vector<history::RunSummary> runs) {
  beginResetModel();
  m_runs = std::move(runs);
  endResetModel();
}

int HistoryModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_runs.size());
}

int HistoryModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant HistoryModel::data(const QModelIndex& index, int role) const {
  if (!isCell(this, index)) return {};
  const history::RunSummary& r = m_runs[static_cast<std::size_t>(index.row())];
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case Id:
        return static_cast<qlonglong>(r.id);
      case Name:
        return q(r.name);
      case Status:
        return q(std::string(history::runStatusName(r.status)));
      case Created:
        return QDateTime::fromMSecsSinceEpoch(r.createdUnixMs).toString(QStringLiteral("yyyy-MM-dd HH:mm"));
      case Backend:
        return q(r.backend);
      case Devices:
        return r.devices;
      case Iterations:
        return r.iterations;
      case DurationMs:
        return q(formatMs(r.durationMs));
      case Events:
        return static_cast<qlonglong>(r.events);
      case Notes:
        return q(r.notes);
      default:
        return {};
    }
  }
  if (role == Qt::UserRole) {  // sort keys
    switch (index.column()) {
      case Created:
        return static_cast<qlonglong>(r.createdUnixMs);
      case DurationMs:
        return r.durationMs;
      default:
        return data(index, Qt::DisplayRole);
    }
  }
  if (role == Qt::ToolTipRole && !r.error.empty()) return q(r.error);
  return {};
}

QVariant HistoryModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole || orientation != Qt::Horizontal) return {};
  static constexpr std::array<const char*, ColumnCount> kNames{
      "Id", "Name", "Status", "Created", "Backend", "Devices", "Iterations", "Duration", "Events", "Notes"};
  return section >= 0 && section < ColumnCount
             ? QVariant(QString::fromLatin1(kNames[static_cast<std::size_t>(section)]))
             : QVariant();
}

HistoryDock::HistoryDock(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  m_filter = new QLineEdit(this);
  m_filter->setPlaceholderText(QStringLiteral("Filter runs (name, status, backend, notes)…"));
  m_filter->setClearButtonEnabled(true);
  layout->addWidget(m_filter);
  m_model = new HistoryModel(this);
  m_proxy = new QSortFilterProxyModel(this);
  m_proxy->setSourceModel(m_model);
  m_proxy->setSortRole(Qt::UserRole);
  m_proxy->setFilterKeyColumn(-1);
  m_proxy->setFilterCaseSensitivity(Qt::CaseInsensitive);
  m_view = new QTableView(this);
  m_view->setModel(m_proxy);
  m_view->setSortingEnabled(true);
  m_view->sortByColumn(HistoryModel::Id, Qt::DescendingOrder);
  m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_view->verticalHeader()->setVisible(false);
  m_view->horizontalHeader()->setStretchLastSection(true);
  layout->addWidget(m_view);
  m_empty = new QLabel(this);
  m_empty->setObjectName(QStringLiteral("HistoryEmptyHint"));
  m_empty->setWordWrap(true);
  m_empty->setTextFormat(Qt::RichText);
  m_empty->setText(QStringLiteral(
      "<p><b>No runs recorded yet.</b></p><p>To record one: <b>Plan &gt; Run Locally…</b> (Ctrl+R) runs the plan on "
      "this machine; <b>Plan &gt; Deploy…</b> runs it on GPU nodes over SSH; or from a shell "
      "<code>pipestudio-cli run plan.json</code> (a saved workspace works too). Runs appear here as they are "
      "recorded; select one and press <b>Compare with plan</b>.</p>"));
  m_empty->setVisible(false);
  layout->addWidget(m_empty);
  // Rows of three buttons: the dock stays narrow enough to share a 1024-pixel screen.
  auto* buttons = new QGridLayout;
  int buttonCount = 0;
  auto addButton = [&](const QString& text, void (HistoryDock::*slot)()) {
    auto* b = new QPushButton(text, this);
    connect(b, &QPushButton::clicked, this, slot);
    buttons->addWidget(b, buttonCount / 3, buttonCount % 3);
    ++buttonCount;
  };
  addButton(QStringLiteral("Open"), &HistoryDock::openSelected);
  addButton(QStringLiteral("Compare with plan"), &HistoryDock::compareWithPlan);
  addButton(QStringLiteral("Compare"), &HistoryDock::compareSelected);
  addButton(QStringLiteral("Rename…"), &HistoryDock::renameSelected);
  addButton(QStringLiteral("Note…"), &HistoryDock::annotateSelected);
  addButton(QStringLiteral("Delete"), &HistoryDock::deleteSelected);
  addButton(QStringLiteral("Refresh"), &HistoryDock::refresh);
  layout->addLayout(buttons);
  m_status = new QLabel(this);
  m_status->setWordWrap(true);
  layout->addWidget(m_status);
  connect(m_filter, &QLineEdit::textChanged, m_proxy, &QSortFilterProxyModel::setFilterFixedString);
  connect(m_view, &QTableView::doubleClicked, this, [this](const QModelIndex&) { openSelected(); });
  m_watcher = new QFileSystemWatcher(this);
  connect(m_watcher, &QFileSystemWatcher::fileChanged, this, [this]() { refresh(); });
  connect(m_watcher, &QFileSystemWatcher::directoryChanged, this, [this]() { refresh(); });
  m_poll = new QTimer(this);
  m_poll->setInterval(1000);
  connect(m_poll, &QTimer::timeout, this, [this]() {
    // Cheap: the database is read only when its file or its write-ahead log changed.
    if (!m_store) return;
    const QString path = QString::fromStdString(m_store->path());
    QString stamp;
    for (const QString& f : {path, QString(path + QStringLiteral("-wal"))}) {
      const QFileInfo info(f);
      stamp += QStringLiteral("%1:%2;").arg(info.size()).arg(info.lastModified().toMSecsSinceEpoch());
    }
    if (stamp == m_fileStamp) return;
    m_fileStamp = stamp;
    refresh();
  });
}

namespace {
/// The workers only read: a read-only connection never waits for this dock's own writes
/// (rename, delete) or a recorder's open write transaction, and never migrates or recovers.
history::OpenOptions readerOptions() {
  history::OpenOptions options;
  options.readOnly = true;
  return options;
}
}  // namespace

HistoryDock::~HistoryDock() = default;

bool HistoryDock::openDatabase(const QString& path, QString* error) {
  m_listJob.invalidate();  // what the previous database said no longer matters
  m_readJob.invalidate();
  auto store = history::HistoryStore::open(path.toStdString());
  auto reader = store ? history::HistoryStore::open(path.toStdString(), readerOptions()) : store.error();
  if (!store || !reader) {
    m_status->setText(q(!store ? store.message() : reader.message()));
    if (error) *error = m_status->text();
    m_store.reset();
    m_reader.reset();
    m_model->setRuns({});
    return false;
  }
  m_store = std::make_unique<history::HistoryStore>(std::move(*store));
  m_reader = std::make_shared<Reader>();
  m_reader->store = std::make_unique<history::HistoryStore>(std::move(*reader));
  m_status->setText(path);
  // Other processes write the database (and its -wal file): watch both and their folder.
  if (!m_watcher->files().isEmpty()) m_watcher->removePaths(m_watcher->files());
  if (!m_watcher->directories().isEmpty()) m_watcher->removePaths(m_watcher->directories());
  QStringList watched{path};
  if (QFileInfo::exists(path + QStringLiteral("-wal"))) watched << path + QStringLiteral("-wal");
  watched << QFileInfo(path).absolutePath();
  m_watcher->addPaths(watched);
  m_poll->start();
  m_signature.clear();
  refresh();
  return true;
}

void HistoryDock::refresh() {
  if (!m_store || !m_reader) return;
  m_listJob.start(
      [reader = m_reader](const JobTracker::Control&) -> Expected<std::vector<history::RunSummary>> {
        std::lock_guard lock(reader->mutex);
        return reader->store->listRuns();
      },
      [this](Expected<std::vector<history::RunSummary>> runs) { showRuns(std::move(runs)); });
}

bool HistoryDock::waitForIdle(int timeoutMs) const {
  return m_listJob.waitForIdle(timeoutMs) && m_readJob.waitForIdle(timeoutMs);
}

void HistoryDock::showRuns(Expected<std::vector<history::RunSummary>> runs) {
  if (!m_store) return;  // closed meanwhile
  if (!runs) {
    m_status->setText(q(runs.message()));
    return;
  }
  QString signature;
  for (const history::RunSummary& r : *runs) {
    signature +=
        QStringLiteral("%1:%2:%3:%4;").arg(r.id).arg(static_cast<int>(r.status)).arg(r.events).arg(q(r.name + r.notes));
  }
  const bool empty = runs->empty();
  m_empty->setVisible(empty);
  m_view->setVisible(!empty);
  if (signature == m_signature) return;  // unchanged: keep the view (and its selection) as is
  m_signature = signature;
  const std::vector<history::RunId> selected = selectedRuns();
  const int count = static_cast<int>(runs->size());
  m_model->setRuns(std::move(*runs));
  for (history::RunId id : selected) {
    for (int row = 0; row < m_model->rowCount(); ++row) {
      if (m_model->run(row).id != id) continue;
      m_view->selectionModel()->select(m_proxy->mapFromSource(m_model->index(row, 0)),
                                       QItemSelectionModel::Select | QItemSelectionModel::Rows);
    }
  }
  Q_EMIT runsChanged(count);
}

template <typename Read, typename Done>
void HistoryDock::readRunsInBackground(Read read, Done done) {
  if (!m_store || !m_reader) {
    Q_EMIT message(QStringLiteral("No history database is open"), true);
    return;
  }
  using Result = std::invoke_result_t<Read&, history::HistoryStore&>;
  m_readJob.start(
      [reader = m_reader, read](const JobTracker::Control&) -> Result {
        std::lock_guard lock(reader->mutex);
        return read(*reader->store);
      },
      [this, done](Result result) {
        if (!result) {
          Q_EMIT message(q(result.message()), true);
          return;
        }
        done(std::move(*result));
      });
}

namespace {
using PlanPair = std::pair<std::shared_ptr<const Plan>, std::shared_ptr<const Plan>>;

Expected<std::shared_ptr<const Plan>> sharedRunPlan(history::HistoryStore& store, history::RunId id) {
  PS_ASSIGN_OR_RETURN(auto plan, store.runAsPlan(id, 0));
  return std::make_shared<const Plan>(std::move(plan));
}
}  // namespace

void HistoryDock::compareWithPlan() {
  const auto ids = selectedRuns();
  if (ids.empty() || !m_store) {
    Q_EMIT message(QStringLiteral("Select a run to compare with its plan"), true);
    return;
  }
  const history::RunId id = ids.front();
  readRunsInBackground(
      [id](history::HistoryStore& store) -> Expected<MeasuredRunView> {
        auto view = gui::readMeasuredRun(store, id);
        if (view && !view->plan) {
          return Error{"Run " + std::to_string(id) +
                       " has no plan recorded (imported traces carry none: use history import --plan)"};
        }
        return view;
      },
      [this](const MeasuredRunView& view) { Q_EMIT runAgainstPlanRequested(view); });
}

std::vector<history::RunId> HistoryDock::selectedRuns() const {
  std::vector<history::RunId> ids;
  for (const QModelIndex& index : m_view->selectionModel()->selectedRows()) {
    ids.push_back(m_model->run(m_proxy->mapToSource(index).row()).id);
  }
  return ids;
}

void HistoryDock::readRunPlan(history::RunId id, std::function<void(std::shared_ptr<const Plan>)> done) {
  readRunsInBackground([id](history::HistoryStore& store) { return sharedRunPlan(store, id); }, std::move(done));
}

void HistoryDock::readMeasuredRun(history::RunId id, std::function<void(MeasuredRunView)> done) {
  readRunsInBackground([id](history::HistoryStore& store) { return gui::readMeasuredRun(store, id); }, std::move(done));
}

void HistoryDock::openSelected() {
  const auto ids = selectedRuns();
  if (ids.empty()) return;
  readMeasuredRun(ids.front(), [this](const MeasuredRunView& view) { Q_EMIT openRunRequested(view); });
}

void HistoryDock::compareSelected() {
  const auto ids = selectedRuns();
  if (ids.size() != 2) {
    Q_EMIT message(QStringLiteral("Select exactly two runs to compare"), true);
    return;
  }
  readRunsInBackground(
      [a = ids[0], b = ids[1]](history::HistoryStore& store) -> Expected<PlanPair> {
        PS_ASSIGN_OR_RETURN(auto first, sharedRunPlan(store, a));
        PS_ASSIGN_OR_RETURN(auto second, sharedRunPlan(store, b));
        return PlanPair{first, second};
      },
      [this](const PlanPair& plans) { Q_EMIT compareRequested(plans.first, plans.second); });
}

void HistoryDock::renameSelected() {
  const auto ids = selectedRuns();
  if (ids.empty() || !m_store) return;
  bool ok = false;
  const QString name = QInputDialog::getText(this, QStringLiteral("Rename run"), QStringLiteral("Name"),
                                             QLineEdit::Normal, QString(), &ok);
  if (!ok) return;
  if (Status s = m_store->renameRun(ids.front(), name.toStdString()); !s) Q_EMIT message(q(s.message()), true);
  refresh();
}

void HistoryDock::annotateSelected() {
  const auto ids = selectedRuns();
  if (ids.empty() || !m_store) return;
  bool ok = false;
  const QString notes =
      QInputDialog::getMultiLineText(this, QStringLiteral("Annotate run"), QStringLiteral("Notes"), QString(), &ok);
  if (!ok) return;
  if (Status s = m_store->annotateRun(ids.front(), notes.toStdString()); !s) Q_EMIT message(q(s.message()), true);
  refresh();
}

void HistoryDock::deleteSelected() {
  const auto ids = selectedRuns();
  if (ids.empty() || !m_store) return;
  if (QMessageBox::question(this, QStringLiteral("Delete runs"),
                            QStringLiteral("Delete %1 run(s) and their events?").arg(ids.size())) != QMessageBox::Yes)
    return;
  for (history::RunId id : ids) {
    if (Status s = m_store->deleteRun(id); !s) Q_EMIT message(q(s.message()), true);
  }
  refresh();
}

}  // namespace pipestudio::gui
