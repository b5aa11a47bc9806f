#include "WheelGuard.hpp"

#include <QAbstractSpinBox>
#include <QComboBox>
#include <QEvent>
#include <QWidget>

namespace pipestudio::gui {

void WheelGuard::install(QWidget* root) {
  // One guard per root, owned by it.
  auto* guard = root->findChild<WheelGuard*>(QString(), Qt::FindDirectChildrenOnly);
  if (!guard) guard = new WheelGuard(root);
  QList<QWidget*> boxes;
  for (auto* spin : root->findChildren<QAbstractSpinBox*>()) boxes << spin;
  for (auto* combo : root->findChildren<QComboBox*>()) boxes << combo;
  for (QWidget* box : boxes) {
    box->setFocusPolicy(Qt::StrongFocus);  // not Qt::WheelFocus: the wheel does not take focus
    box->removeEventFilter(guard);
    box->installEventFilter(guard);
  }
}

bool WheelGuard::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() != QEvent::Wheel) return false;
  auto* widget = qobject_cast<QWidget*>(watched);
  if (!widget || widget->hasFocus()) return false;
  // Not for this box: ignored, so QApplication hands the event on to the parent (the scroll area).
  event->ignore();
  return true;
}

}  // namespace pipestudio::gui
