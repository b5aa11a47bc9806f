#include "GuiText.hpp"

#include <QRegularExpression>
#include <array>

#include "pipestudio/planner/Schedules.hpp"

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
    {"--precision", "Precision"},
    {"--etp", "ETP"},
    {"--moe-token-dispatcher", "Dispatcher"},
    {"--moe-flex-backend", "Dispatcher"},
    {"--moe-capacity-factor", "Capacity factor"},
    {"--moe-a2a-overlap", "Overlap expert all-to-alls"},
    {"--moe-shared-expert-overlap", "Overlap shared experts"},
    {"--moe-comm-sms", "All-to-all SMs"},
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

QString summaryLine(const QString& message) {
  const QStringList lines = message.trimmed().split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  if (lines.isEmpty()) return {};
  constexpr int kMaxLines = 3;
  QString out = lines.front().trimmed();
  int used = 1;
  while (out.endsWith(QLatin1Char(':')) && used < lines.size() && used < kMaxLines) {
    out += QLatin1Char(' ') + lines[used].trimmed();
    ++used;
  }
  if (used < lines.size()) out += QStringLiteral(" …");
  return out;
}

namespace {
QString text(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); }

/// Whether the schedule of `config` turns a setting on itself (ScheduleGenerator::configure:
/// DualPipe's F&B pairing, zeropp's units): then it is the schedule's, not a setting to list.
template <typename Clear, typename IsSet>
bool scheduleSets(const PlanConfig& config, Clear clear, IsSet isSet) {
  const ScheduleGenerator* generator = findScheduleGenerator(config.schedule);
  if (!generator) return false;
  PlanConfig probe = config;
  clear(probe);
  generator->configure(probe);
  return isSet(probe);
}
}  // namespace

QString moeSettingsText(const PlanConfig& config) {
  const Parallelism& par = config.parallel;
  const Parallelism defaults;
  QStringList parts;
  if (par.expert > 1) parts << QStringLiteral("EP %1").arg(par.expert);
  if (par.expertTensor > 0) parts << QStringLiteral("ETP %1").arg(par.expertTensor);
  if (par.moeFlexDispatcher)
    parts << (par.moeFlexBackend == FlexBackend::HybridEp ? QStringLiteral("flex (HybridEP)")
                                                          : QStringLiteral("flex (DeepEP)"));
  if (par.moeCapacityFactor) {
    parts << (*par.moeCapacityFactor > 0 ? QStringLiteral("capacity %1").arg(*par.moeCapacityFactor)
                                         : QStringLiteral("dropless"));
  }
  if (par.moeA2aOverlap) parts << QStringLiteral("A2A overlap");
  if (par.moeSharedExpertOverlap) parts << QStringLiteral("shared-expert overlap");
  if (par.moeCommSms != defaults.moeCommSms) parts << QStringLiteral("%1 comm SMs").arg(par.moeCommSms);
  if (par.moePermuteFusionIntoDispatcher) parts << QStringLiteral("permute in HybridEP");
  if (par.moeCombineChunkTokens > 0) parts << QStringLiteral("combine chunk %1").arg(par.moeCombineChunkTokens);
  if (par.moeRankCapacityFactor) parts << QStringLiteral("rank budget %1").arg(*par.moeRankCapacityFactor);
  if (par.moePagedStash) parts << QStringLiteral("paged stash %1").arg(par.moePagedStashBufferFactorOrDefault());
  return parts.join(QStringLiteral(" · "));
}

QStringList hiddenSettings(const PlanConfig& config) {
  const Parallelism& par = config.parallel;
  const Parallelism defaults;
  const PlanConfig base;
  QStringList out;
  if (par.recompute == Recompute::Selective && par.recomputeModules != 0)
    out << QStringLiteral("recompute modules %1")
               .arg(QString::fromStdString(recomputeModulesName(par.recomputeModules)));
  if (par.recompute == Recompute::Full && par.recomputeNumLayers > 0) {
    out << QStringLiteral("recompute %1 layers (%2)")
               .arg(par.recomputeNumLayers)
               .arg(text(recomputeMethodName(par.recomputeMethod)));
  }
  if (par.cpCommType != defaults.cpCommType) out << QStringLiteral("CP %1").arg(text(cpCommTypeName(par.cpCommType)));
  if (par.attentionBackend != defaults.attentionBackend)
    out << QStringLiteral("attention %1").arg(text(attentionBackendName(par.attentionBackend)));
  if (par.gradReduceInFp32) out << QStringLiteral("gradients reduced in fp32");
  if (config.overlapForwardBackward && !scheduleSets(
                                           config, [](PlanConfig& c) { c.overlapForwardBackward = false; },
                                           [](const PlanConfig& c) { return c.overlapForwardBackward; }))
    out << QStringLiteral("F&B overlap");
  if (config.vocabBarriers != base.vocabBarriers) out << QStringLiteral("vocab barriers %1").arg(config.vocabBarriers);
  if (config.seqSplits > 1 && config.seqSplit != base.seqSplit)
    out << QStringLiteral("sequence split %1").arg(QString::fromStdString(config.seqSplit));
  if (config.unitMicrobatches > 0 && !scheduleSets(
                                         config, [](PlanConfig& c) { c.unitMicrobatches = 0; },
                                         [](const PlanConfig& c) { return c.unitMicrobatches > 0; }))
    out << QStringLiteral("%1 microbatches per unit").arg(config.unitMicrobatches);
  return out;
}

}  // namespace pipestudio::gui
