#pragma once
// Messages as the window shows them: the planner names its options the way the command line
// spells them (`--tp 3 does not divide …`); the GUI says the name of its own field instead
// ("TP 3 does not divide …"). One table maps each flag to the solver panel's label.

#include <QString>

namespace pipestudio::gui {

/// The solver panel's label for a CLI flag ("--tp" → "TP"), or the flag itself when unknown.
QString fieldNameOfFlag(const QString& flag);
/// `message` with every known CLI flag replaced by its field name.
QString withFieldNames(const QString& message);
/// The first line of a message, for one-line summaries.
QString firstLine(const QString& message);

}  // namespace pipestudio::gui
