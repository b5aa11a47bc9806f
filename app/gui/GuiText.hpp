#pragma once
// Messages and settings as the window shows them: the planner names its options the way the command line
// spells them (`--tp 3 does not divide …`); the GUI says the name of its own field instead
// ("TP 3 does not divide …"). One table maps each flag to the solver panel's label.

#include <QString>
#include <QStringList>

#include "pipestudio/plan/Plan.hpp"

namespace pipestudio::gui {

/// The solver panel's label for a CLI flag ("--tp" → "TP"), or the flag itself when unknown.
QString fieldNameOfFlag(const QString& flag);
/// `message` with every known CLI flag replaced by its field name.
QString withFieldNames(const QString& message);
/// The first line of a message, for one-line summaries.
QString firstLine(const QString& message);
/// A message's summary for one place on screen: its first line, and while that ends in ':' the
/// lines it introduces ("does not fit: device 3 over by 2.1 GiB"), with " …" when more follows.
QString summaryLine(const QString& message);

/// The mixture-of-experts settings of `config` ("EP 8 · ETP 1 · flex (DeepEP) · capacity 1.25 ·
/// A2A overlap"), empty with EP 1 and every MoE setting at its default.
QString moeSettingsText(const PlanConfig& config);
/// The settings of `config` that the solver panel has no field for and that differ from their
/// defaults ("recompute modules core_attn,mlp", "CP a2a", "attention flash2", "gradients reduced
/// in fp32", "F&B overlap", …), one entry each: a workspace or the Configure dock may set them.
QStringList hiddenSettings(const PlanConfig& config);

}  // namespace pipestudio::gui
