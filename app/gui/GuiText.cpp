#include "GuiText.hpp"

#include <QRegularExpression>
#include <array>

namespace pipestudio::gui {

namespace {

struct FlagName {
  const char* flag;
  const char* field;
};
// The solver panel's labels (MainWindow::buildSolverPanel) for pipestudio-cli plan's flags.
constexpr auto kFlagNames = std::to_array<FlagName>({
    {"--schedule", "Schedule"},
    {"--devices", "Devices"},
    {"--microbatches", "Microbatches"},
    {"--chunks", "Chunks / device"},
    {"--seq-splits", "Sequence splits"},
    {"--offload-ratio", "Offload ratio"},
    {"--partition", "Partition"},
    {"--fill", "Fill"},
    {"--memory-limit", "Memory limit"},
    {"--tp", "TP"},
    {"--cp", "CP"},
    {"--ep", "EP"},
    {"--dp", "DP"},
    {"--sequence-parallel", "Sequence parallel"},
    {"--no-sequence-parallel", "Sequence parallel (off)"},
    {"--recompute", "Recompute"},
    {"--zero", "ZeRO"},
    {"--global-batch", "Global batch"},
    {"--micro-batch-size", "Micro-batch size"},
    {"--optimizer-sync", "Optimizer sync"},
    {"--no-overlap-grad-reduce", "overlapped gradient reduction (off)"},
});

}  // namespace

QString fieldNameOfFlag(const QString& flag) {
  for (const FlagName& f : kFlagNames) {
    if (flag == QLatin1String(f.flag)) return QString::fromLatin1(f.field);
  }
  return flag;
}

QString withFieldNames(const QString& message) {
  // A flag is "--" plus lower-case words joined by dashes, not followed by more of them.
  static const QRegularExpression flag(QStringLiteral("--[a-z][a-z0-9]*(?:-[a-z0-9]+)*"));
  QString out;
  qsizetype last = 0;
  for (auto it = flag.globalMatch(message); it.hasNext();) {
    const QRegularExpressionMatch m = it.next();
    out += message.mid(last, m.capturedStart() - last);
    out += fieldNameOfFlag(m.captured());
    last = m.capturedEnd();
  }
  out += message.mid(last);
  return out;
}

QString firstLine(const QString& message) { return message.section(QLatin1Char('\n'), 0, 0).trimmed(); }

}  // namespace pipestudio::gui
