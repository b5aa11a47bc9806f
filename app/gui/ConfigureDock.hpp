#pragma once
// The Configure dock (issue 29): `pipestudio-cli configure` in the window. For the model and
// cluster in the editors and a fixed global batch, the configurator (planner Configurator.hpp)
// searches tensor × context × pipeline × data (× expert) degrees, micro-batch size, schedule,
// chunks, recomputation and ZeRO off the GUI thread, with progress and cancel; the ranked
// feasible configurations fill a table (configuration, iteration time, tokens/s, MFU, memory
// headroom) with how many were screened and pruned and why (the rejected families). A click
// loads a configuration into the solver panel; two pinned rows open side by side in the compare
// view.
//
// The search's options are a list of knobs (ConfigureDock.cpp, `buildKnobs`): one row each, a
// widget and how it sets ConfigureOptions, so a new configurator option is one more entry.

#include <QAbstractTableModel>
#include <QWidget>
#include <functional>
#include <memory>
#include <vector>

#include "JobTracker.hpp"
#include "pipestudio/planner/Configurator.hpp"

class QLabel;
class QProgressBar;
class QPushButton;
class QTableView;
class QTableWidget;
class QFormLayout;

namespace pipestudio::gui {

/// The ranked configurations of one search: a pin box, rank, iteration time, tokens/s, MFU,
/// memory headroom (GPU capacity − the fullest GPU's peak) and the configuration.
class ConfigureModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  /// The configuration last: the numbers stay in view in a narrow dock, the text stretches.
  enum Column { Pin, Rank, IterationMs, TokensPerS, Mfu, Headroom, Configuration, ColumnCount };
  explicit ConfigureModel(QObject* parent = nullptr);
  /// `capacityBytes`: what each GPU holds (the headroom is measured against it).
  void setResult(std::shared_ptr<const pipestudio::Configuration> result, std::int64_t capacityBytes);
  const pipestudio::Configuration* result() const { return m_result.get(); }
  const ConfigCandidate& candidate(int row) const;
  /// Pinned rows, in rank order.
  std::vector<int> pinnedRows() const;
  void setPinned(int row, bool pinned);
  std::int64_t headroomBytes(int row) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::shared_ptr<const pipestudio::Configuration> m_result;
  std::vector<char> m_pinned;
  std::int64_t m_capacityBytes = 0;
};

/// A configuration in one line: "zb-h1 · PP 4 × TP 8 × DP 2 · mbs 1, 32 microbatches · recompute
/// selective · ZeRO 1".
QString configurationText(const PlanConfig& config);

class ConfigureDock : public QWidget {
  Q_OBJECT
 public:
  /// `inputs` gives the model and cluster to search over (read when a search starts).
  explicit ConfigureDock(std::function<PlanRequest()> inputs, QWidget* parent = nullptr);

  /// The options the knobs describe now.
  ConfigureOptions options() const;
  /// Starts a search (a running one is cancelled and its result dropped).
  void search();
  void cancel();
  /// The editors now hold `model` on `cluster`: results of another model or cluster are
  /// cleared (a running search for them is cancelled), the summary says so.
  void inputsReplaced(const std::string& model, const std::string& cluster);
  bool isSearching() const { return m_searching; }
  /// Processes events until the search and any planning of pinned rows have finished (tests).
  bool waitForIdle(int timeoutMs) const;
  /// Loads row `row`'s configuration into the solver panel (what a click does).
  void chooseRow(int row);
  /// Plans the two pinned configurations and shows them in the compare view.
  void comparePinned();

  ConfigureModel* model() const { return m_model; }
  QTableView* table() const { return m_table; }
  QTableWidget* rejectedTable() const { return m_rejected; }
  QLabel* summaryLabel() const { return m_summary; }
  QProgressBar* progressBar() const { return m_progress; }
  QPushButton* searchButton() const { return m_searchButton; }
  QPushButton* cancelButton() const { return m_cancelButton; }
  QPushButton* compareButton() const { return m_compareButton; }
  /// A knob's widget by its label ("Global batch", "Keep", …), for tests.
  QWidget* knob(const QString& label) const;

 Q_SIGNALS:
  void configurationChosen(const pipestudio::PlanConfig& config);
  void compareRequested(std::shared_ptr<const pipestudio::Plan> first, std::shared_ptr<const pipestudio::Plan> second);
  void message(const QString& text, bool error);

 private:
  /// One row of the options form: its label, widget and how it sets the options.
  struct Knob {
    QString label;
    QWidget* widget = nullptr;
    std::function<void(ConfigureOptions&)> apply;
  };
  void buildKnobs(QFormLayout* form);
  void showResult(Expected<pipestudio::Configuration> result);
  void showRejected(const pipestudio::Configuration& result);
  void updateCompareButton();

  std::function<PlanRequest()> m_inputs;
  PlanRequest m_searched;  ///< model and cluster of the result shown
  std::vector<Knob> m_knobs;
  ConfigureModel* m_model = nullptr;
  QTableView* m_table = nullptr;
  QTableWidget* m_rejected = nullptr;
  QLabel* m_summary = nullptr;
  QProgressBar* m_progress = nullptr;
  QPushButton* m_searchButton = nullptr;
  QPushButton* m_cancelButton = nullptr;
  QPushButton* m_compareButton = nullptr;
  bool m_searching = false;
  JobTracker m_planJob{this, 1};    ///< planning two pinned rows for the compare view
  JobTracker m_searchJob{this, 1};  ///< the search (last member: destroyed first)
};

}  // namespace pipestudio::gui
