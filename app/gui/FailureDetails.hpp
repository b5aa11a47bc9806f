#pragma once
// The solver panel's Details… dialog: the whole message of a failed solve and, for plans that
// do not fit, the per-device memory table against each GPU's capacity with what would help.

#include <QString>

class QDialog;
class QWidget;

namespace pipestudio::gui {

struct MemoryDiagnosis;

/// Opens the dialog (non-modal, deleted on close) and returns it.
QDialog* showFailureDetails(QWidget* parent, const QString& failure, const MemoryDiagnosis* diagnosis);

}  // namespace pipestudio::gui
