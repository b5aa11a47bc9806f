#pragma once
/// \file The Selection dock's content (what Perfetto and Nsight users expect of a selection):
/// the selected op's fields, what it waited for, its predecessors and successors as links
/// (clicking one selects it and brings it on screen), its slack to the critical path and its
/// collective share; below, the measured time range with busy and idle time per device.

#include <QWidget>
#include <vector>

#include "pipestudio/viz/TimelineData.hpp"

class QTextBrowser;

namespace pipestudio::viz {

class TimelineView;

class SelectionPanel : public QWidget {
  Q_OBJECT
 public:
  explicit SelectionPanel(TimelineView* view, QWidget* parent = nullptr);

  /// The text as shown (plain), and the ops its links lead to, in order.
  QString plainText() const;
  const std::vector<int>& linkedOps() const { return m_links; }
  /// Follows a link as a click would ("op:12").
  void activateLink(const QString& href);
  QTextBrowser* browser() const { return m_browser; }

 private:
  void rebuild();
  QString opHtml(int op);
  QString measurementHtml() const;

  TimelineView* m_view;
  QTextBrowser* m_browser = nullptr;
  std::vector<int> m_links;
};

}  // namespace pipestudio::viz
