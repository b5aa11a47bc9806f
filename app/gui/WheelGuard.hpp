#pragma once
// The mouse wheel edits a spin or combo box only while it has keyboard focus (issue 29): a
// wheel over an unfocused box scrolls what contains it instead, so scrolling a panel never
// changes a setting. Boxes take focus by click or Tab, not by the wheel.

#include <QObject>

class QWidget;

namespace pipestudio::gui {

class WheelGuard : public QObject {
  Q_OBJECT
 public:
  /// Guards every spin box and combo box inside `root` (those created later are not covered:
  /// call again after adding some).
  static void install(QWidget* root);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  using QObject::QObject;
};

}  // namespace pipestudio::gui
