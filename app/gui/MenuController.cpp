#include "MenuController.hpp"

#include <QAction>
#include <QApplication>
#include <QDialog>
#include <QDialogButtonBox>
#include <QMainWindow>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QSettings>
#include <QStyleFactory>
#include <QTabWidget>
#include <QTextBrowser>
#include <QToolBar>
#include <QUndoStack>
#include <QVBoxLayout>
#include <array>
#include <initializer_list>

#include "RunController.hpp"
#include "SolveController.hpp"
#include "WorkspaceController.hpp"
#include "pipestudio/viz/TimelinePlottable.hpp"
#include "pipestudio/viz/TimelineView.hpp"

namespace pipestudio::gui {

namespace {

/// Adds an action to a menu or tool bar (QMenu's own receiver overloads are deprecated in 6.4).
template <typename Context, typename Functor>
QAction* makeAction(QWidget* container, const QString& text, const QKeySequence& shortcut, const Context* context,
                    Functor functor) {
  auto* action = new QAction(text, container);
  if (!shortcut.isEmpty()) action->setShortcut(shortcut);
  QObject::connect(action, &QAction::triggered, context, functor);
  container->addAction(action);
  return action;
}

QAction* makeToggle(QMenu* menu, const QString& text, bool checked, const QKeySequence& shortcut = {}) {
  QAction* action = menu->addAction(text);
  action->setCheckable(true);
  action->setChecked(checked);
  if (!shortcut.isEmpty()) action->setShortcut(shortcut);
  return action;
}

// A titled table of shortcuts: the key in bold, then what it does.
QString shortcutTable(const char* title, std::initializer_list<std::pair<const char*, const char*>> rows) {
  QString html = QStringLiteral("<h3>%1</h3><table cellspacing='3'>").arg(QString::fromUtf8(title));
  for (const auto& [key, what] : rows)
    html +=
        QStringLiteral("<tr><td><b>%1</b></td><td>%2</td></tr>").arg(QString::fromUtf8(key), QString::fromUtf8(what));
  return html + QStringLiteral("</table>");
}

}  // namespace

void applyTheme(const QString& theme) {
  QApplication::setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
  bool dark = theme == QStringLiteral("dark");
  if (theme != QStringLiteral("dark") && theme != QStringLiteral("light")) {
    const QString gtk = qEnvironmentVariable("GTK_THEME").toLower();
    dark = gtk.contains(QStringLiteral("dark")) ||
           QApplication::style()->standardPalette().color(QPalette::Window).lightness() < 128;
  }
  QPalette p = QApplication::style()->standardPalette();
  if (dark) {
    p.setColor(QPalette::Window, QColor(0x2d, 0x2f, 0x33));
    p.setColor(QPalette::WindowText, QColor(0xe6, 0xe6, 0xe6));
    p.setColor(QPalette::Base, QColor(0x1f, 0x21, 0x24));
    p.setColor(QPalette::AlternateBase, QColor(0x28, 0x2a, 0x2e));
    p.setColor(QPalette::ToolTipBase, QColor(0x3a, 0x3d, 0x42));
    p.setColor(QPalette::ToolTipText, QColor(0xf0, 0xf0, 0xf0));
    p.setColor(QPalette::Text, QColor(0xe6, 0xe6, 0xe6));
    p.setColor(QPalette::Button, QColor(0x35, 0x38, 0x3d));
    p.setColor(QPalette::ButtonText, QColor(0xe6, 0xe6, 0xe6));
    p.setColor(QPalette::Highlight, QColor(0x3d, 0x7e, 0xd6));
    p.setColor(QPalette::HighlightedText, Qt::white);
    p.setColor(QPalette::PlaceholderText, QColor(0x90, 0x90, 0x90));
    p.setColor(QPalette::Disabled, QPalette::Text, QColor(0x80, 0x80, 0x80));
    p.setColor(QPalette::Disabled, QPalette::ButtonText, QColor(0x80, 0x80, 0x80));
  }
  QApplication::setPalette(p);
}

MenuController::MenuController(QMainWindow* window, MenuTargets targets)
    : QObject(window), m_window(window), m_targets(std::move(targets)) {
  buildFileMenu();
  buildEditMenu();
  buildViewMenu();
  buildPlanMenu();
  buildHelpMenu();
  buildToolBar();
}

void MenuController::setPlanActionsEnabled(bool enabled, const QString& why) {
  for (QAction* action : {m_runAction, m_deployAction}) {
    if (!action) continue;
    action->setEnabled(enabled);
    const QString name = action->text().remove(QLatin1Char('&')).remove(QStringLiteral("…"));
    action->setToolTip(enabled ? name : name + QStringLiteral(": ") + why);
    action->setStatusTip(enabled ? QString() : why);
  }
}

void MenuController::buildFileMenu() {
  WorkspaceController* workspace = m_targets.workspace;
  RunController* runs = m_targets.runs;
  QMenu* file = m_window->menuBar()->addMenu(QStringLiteral("&File"));
  makeAction(file, QStringLiteral("&Open…"), QKeySequence::Open, workspace, &WorkspaceController::openDialog);
  workspace->setRecentMenu(file->addMenu(QStringLiteral("Open &Recent")));
  makeAction(file, QStringLiteral("Open &Default Workspace"), QKeySequence(), workspace,
             [workspace]() { workspace->openDefaultWorkspace(); });
  file->addSeparator();
  makeAction(file, QStringLiteral("&Save Workspace"), QKeySequence::Save, workspace,
             [workspace]() { workspace->saveDialog(false); });
  makeAction(file, QStringLiteral("Save Workspace &As…"), QKeySequence::SaveAs, workspace,
             [workspace]() { workspace->saveDialog(true); });
  makeAction(file, QStringLiteral("Re&name Workspace…"), QKeySequence(), workspace, &WorkspaceController::renameDialog);
  file->addSeparator();
  QMenu* exportMenu = file->addMenu(QStringLiteral("&Export"));
  struct ExportEntry {
    const char* text;
    QKeySequence shortcut;
    std::vector<ExportFormat> formats;  ///< the dialog's filters, the first the default
  };
  const std::array<ExportEntry, 8> exports{
      {{"Timeline as &PNG…", QKeySequence(Qt::CTRL | Qt::Key_E), {ExportFormat::Png}},
       {"Timeline as &SVG…", QKeySequence(), {ExportFormat::Svg}},
       {"Timeline as P&DF…", QKeySequence(), {ExportFormat::Pdf}},
       {"Plan &JSON…", QKeySequence(), {ExportFormat::PlanJson}},
       {"&Chrome Trace (Perfetto)…", QKeySequence(), {ExportFormat::ChromeTrace}},
       {"Schedule C&SV…", QKeySequence(), {ExportFormat::ScheduleCsv}},
       {"&Megatron-LM Arguments…", QKeySequence(), {ExportFormat::Megatron}},
       // Python for torchtitan main (as pipestudio-cli export writes by default), TOML for v0.2.2.
       {"&torchtitan Config…", QKeySequence(), {ExportFormat::TorchtitanPython, ExportFormat::TorchtitanToml}}}};
  for (const ExportEntry& e : exports) {
    makeAction(exportMenu, QString::fromUtf8(e.text), e.shortcut, runs,
               [runs, formats = e.formats]() { runs->exportDialog(formats); });
  }
#ifdef PIPESTUDIO_HAVE_HISTORY
  makeAction(file, QStringLiteral("&Import Trace…"), QKeySequence(), runs, &RunController::importTraceDialog);
#endif
  file->addSeparator();
  makeAction(file, QStringLiteral("&Quit"), QKeySequence::Quit, m_window, &QWidget::close);
}

void MenuController::buildEditMenu() {
  QMenu* edit = m_window->menuBar()->addMenu(QStringLiteral("&Edit"));
  QAction* undo = m_targets.undo->createUndoAction(m_window, QStringLiteral("&Undo"));
  undo->setShortcut(QKeySequence::Undo);
  QAction* redo = m_targets.undo->createRedoAction(m_window, QStringLiteral("&Redo"));
  redo->setShortcut(QKeySequence::Redo);
  edit->addAction(undo);
  edit->addAction(redo);
  edit->addSeparator();
  makeAction(edit, QStringLiteral("&Find in Timeline…"), QKeySequence::Find, this, [this]() {
    m_targets.tabs->setCurrentIndex(0);
    m_targets.timeline->showSearch();
  });
}

void MenuController::buildViewMenu() {
  viz::TimelineView* timeline = m_targets.timeline;
  QMenu* view = m_window->menuBar()->addMenu(QStringLiteral("&View"));
  makeAction(view, QStringLiteral("&Fit to View"), QKeySequence(Qt::CTRL | Qt::Key_0), timeline,
             &viz::TimelineView::fitToView);
  makeAction(view, QStringLiteral("Zoom &In"), QKeySequence::ZoomIn, timeline, [timeline]() { timeline->zoom(0.7); });
  makeAction(view, QStringLiteral("Zoom &Out"), QKeySequence::ZoomOut, timeline,
             [timeline]() { timeline->zoom(1 / 0.7); });
  m_criticalPath = makeToggle(view, QStringLiteral("&Critical Path"), true, QKeySequence(Qt::CTRL | Qt::Key_K));
  connect(m_criticalPath, &QAction::toggled, timeline, &viz::TimelineView::setShowCriticalPath);
  QAction* memory = makeToggle(view, QStringLiteral("&Memory Plot"), true, QKeySequence(Qt::CTRL | Qt::Key_M));
  connect(memory, &QAction::toggled, timeline, &viz::TimelineView::setMemoryVisible);
  QAction* title = makeToggle(view, QStringLiteral("&Title Line"), false);
  connect(title, &QAction::toggled, timeline, &viz::TimelineView::setTitleVisible);
  view->addSeparator();
  QTabWidget* tabs = m_targets.tabs;
  makeAction(view, QStringLiteral("&Timeline"), QKeySequence(Qt::CTRL | Qt::Key_1), tabs,
             [tabs]() { tabs->setCurrentIndex(0); });
  makeAction(view, QStringLiteral("Co&mpare"), QKeySequence(Qt::CTRL | Qt::Key_2), tabs,
             [tabs]() { tabs->setCurrentIndex(1); });
  view->addSeparator();
  QMenu* theme = view->addMenu(QStringLiteral("T&heme"));
  for (const QString& name : {QStringLiteral("system"), QStringLiteral("light"), QStringLiteral("dark")}) {
    makeAction(theme, name, QKeySequence(), this, [name]() {
      QSettings().setValue(QStringLiteral("ui/theme"), name);
      applyTheme(name);
    });
  }
  view->addSeparator();
  for (QAction* dock : m_targets.dockActions) view->addAction(dock);
}

void MenuController::buildPlanMenu() {
  QMenu* plan = m_window->menuBar()->addMenu(QStringLiteral("&Plan"));
  makeAction(plan, QStringLiteral("&Solve"), QKeySequence(Qt::Key_F5), this, [this]() { m_targets.solve(); });
  makeAction(plan, QStringLiteral("&Cancel Solve"), QKeySequence(Qt::SHIFT | Qt::Key_Escape), m_targets.solver,
             &SolveController::cancel);
  makeAction(plan, QStringLiteral("&Pin as Baseline"), QKeySequence(Qt::CTRL | Qt::Key_B), this,
             [this]() { m_targets.pinBaseline(); });
  makeAction(plan, QStringLiteral("C&lear Baseline"), QKeySequence(), this, [this]() { m_targets.clearBaseline(); });
  RunController* runs = m_targets.runs;
#ifdef PIPESTUDIO_HAVE_LOCAL_RUN
  plan->addSeparator();
  m_runAction = makeAction(plan, QStringLiteral("&Run Locally…"), QKeySequence(Qt::CTRL | Qt::Key_R), runs,
                           [runs]() { runs->openRunLocalDialog(); });
  m_runAction->setEnabled(false);
#endif
#ifdef PIPESTUDIO_HAVE_REMOTE
  if (!m_runAction) plan->addSeparator();
  m_deployAction = makeAction(plan, QStringLiteral("&Deploy…"), QKeySequence(Qt::CTRL | Qt::Key_D), runs,
                              &RunController::openDeployDialog);
  m_deployAction->setEnabled(false);
#endif
  (void)runs;
  if (m_targets.compareRunWithPlan) {
    makeAction(plan, QStringLiteral("Compare Selected Run with its &Plan"), QKeySequence(), this,
               [this]() { m_targets.compareRunWithPlan(); });
  }
}

void MenuController::buildHelpMenu() {
  QMenu* help = m_window->menuBar()->addMenu(QStringLiteral("&Help"));
  makeAction(help, QStringLiteral("&Keyboard, Mouse and Legend…"), QKeySequence::HelpContents, this,
             &MenuController::showHelp);
  makeAction(help, QStringLiteral("&About PipeStudio"), QKeySequence(), this, [this]() {
    QMessageBox::about(
        m_window, QStringLiteral("About PipeStudio"),
        QStringLiteral("<b>PipeStudio %1</b><p>A workstation for pipeline-parallel training: plan, look, "
                       "run, compare.</p>")
            .arg(QApplication::applicationVersion()));
  });
}

void MenuController::buildToolBar() {
  auto* tools = m_window->addToolBar(QStringLiteral("Main"));
  tools->setObjectName(QStringLiteral("MainToolBar"));
  tools->setMovable(false);
  WorkspaceController* workspace = m_targets.workspace;
  viz::TimelineView* timeline = m_targets.timeline;
  makeAction(tools, QStringLiteral("Open"), QKeySequence(), workspace, &WorkspaceController::openDialog);
  makeAction(tools, QStringLiteral("Save"), QKeySequence(), workspace, [workspace]() { workspace->saveDialog(false); });
  tools->addSeparator();
  makeAction(tools, QStringLiteral("Solve"), QKeySequence(), this, [this]() { m_targets.solve(); });
  makeAction(tools, QStringLiteral("Fit"), QKeySequence(), timeline, &viz::TimelineView::fitToView);
  makeAction(tools, QStringLiteral("Find"), QKeySequence(), this, [this]() {
    m_targets.tabs->setCurrentIndex(0);
    m_targets.timeline->showSearch();
  });
  makeAction(tools, QStringLiteral("Pin baseline"), QKeySequence(), this, [this]() { m_targets.pinBaseline(); });
  if (m_runAction) tools->addAction(m_runAction);
  tools->addAction(m_criticalPath);
}

// --- help ---------------------------------------------------------------------------------

QString MenuController::shortcutsHtml() {
  QString html = shortcutTable(
      "Timeline", {{"Wheel", "zoom time about the cursor"},
                   {"Ctrl+Wheel", "zoom the lanes (taller or more devices)"},
                   {"Shift+Wheel, ↑ / ↓", "scroll the lanes"},
                   {"Shift+↑ / Shift+↓", "zoom the lanes"},
                   {"Drag", "pan"},
                   {"Shift+Drag", "zoom to the rubber band"},
                   {"Ctrl+Drag", "measure a range: duration and idle time per device (Selection dock)"},
                   {"Double-click, 0, Ctrl+0", "fit the whole plan"},
                   {"F", "fit the selection: the selected op and its neighbours, else the measured range, else all"},
                   {"W / S, + / -", "zoom in / out about the mouse"},
                   {"C", "collapse every device to one lane (pipes, streams, transfers) or expand again"},
                   {"A / D, ← / →", "pan left / right"},
                   {"Click", "select an op: dependency chain, arrows to its neighbours, fields in the Selection dock"},
                   {"Ctrl+F", "find ops: “mb 7”, “W”, “vs 12”, “gpu 3”, “F B mb 4-7”; Enter: next match"},
                   {"Esc", "clear selection, search and measurement"},
                   {"Ctrl+K / Ctrl+M", "critical path / memory plot on or off"},
                   {"Memory plot", "hover reads a curve out; click a legend entry to hide or show a GPU"}});
  html += shortcutTable("Window", {{"F5", "solve"},
                                   {"Shift+Esc", "cancel the solve"},
                                   {"Ctrl+B", "pin the plan as baseline"},
                                   {"Ctrl+R", "run the plan locally"},
                                   {"Ctrl+D", "deploy"},
                                   {"Ctrl+1 / Ctrl+2", "timeline / compare"},
                                   {"Ctrl+S", "save the workspace"},
                                   {"Ctrl+E", "export the timeline as PNG"}});
  html += QStringLiteral("<h3>Legend</h3><p>");
  const viz::TimelinePalette palette = viz::TimelinePalette::light();
  const std::array<std::pair<viz::ColourSlot, const char*>, 9> kinds{
      {{viz::ColourSlot::F, "F forward"},
       {viz::ColourSlot::B, "B input gradient"},
       {viz::ColourSlot::W, "W weight gradient"},
       {viz::ColourSlot::BW, "BW fused backward"},
       {viz::ColourSlot::N, "N frozen component (“next iteration” when filled across iterations)"},
       {viz::ColourSlot::S, "S / T vocabulary passes"},
       {viz::ColourSlot::OPT, "OPT optimizer step"},
       {viz::ColourSlot::CommForward, "activation transfer (sub-lane under the device)"},
       {viz::ColourSlot::CommBackward, "gradient transfer"}}};
  for (const auto& [slot, what] : kinds) {
    html += QStringLiteral("<span style='background:%1'>&nbsp;&nbsp;&nbsp;&nbsp;</span> %2<br>")
                .arg(palette.colour(slot).name(), QString::fromUtf8(what));
  }
  html += QStringLiteral(
      "Hatching: bubble (idle inside the device's span; with two pipes, only where the GPU computes on "
      "neither) · interleaved and V schedules: a shade per chunk · measured runs without op ranges: "
      "kernels, memcpy, memset and NCCL per stream, iterations dashed · red outline: critical path (a thin "
      "underline where ops are narrow) · orange outline: the selected op's microbatch chain · "
      "numbers: microbatch · a dimmed, labelled plan is the last good one, not of the current "
      "settings.</p>");
  return html;
}

void MenuController::showHelp() {
  auto* dialog = new QDialog(m_window);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  dialog->setWindowTitle(QStringLiteral("PipeStudio: keyboard, mouse and legend"));
  auto* layout = new QVBoxLayout(dialog);
  auto* text = new QTextBrowser(dialog);
  text->setHtml(shortcutsHtml());
  layout->addWidget(text);
  auto* box = new QDialogButtonBox(QDialogButtonBox::Close, dialog);
  connect(box, &QDialogButtonBox::rejected, dialog, &QDialog::close);
  layout->addWidget(box);
  dialog->resize(560, 600);
  dialog->show();
}

}  // namespace pipestudio::gui
