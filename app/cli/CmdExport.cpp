// pipestudio-cli export PLAN|--run ID [--db DB] --format chrome|csv|megatron|torchtitan [-o FILE]
// (docs/cli.md, issue 15): a plan's or a measured run's timeline as Chrome trace JSON
// (Perfetto), its per-device op order as torch.distributed.pipelining schedule CSV
// (--csv-format compute_only|compute_comms), Megatron-LM arguments, or torchtitan's
// configuration (Python for torchtitan main, TOML for v0.2.2 and earlier: --torchtitan-config)
// with the schedule CSV beside it (or at --csv-output). Without -o the export goes to stdout
// (torchtitan needs -o: its configuration names the CSV file written next to it).
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "Commands.hpp"
#include "Flags.hpp"
#include "Inputs.hpp"
#include "pipestudio/common/Files.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/Export.hpp"

#if __has_include("pipestudio/history/HistoryStore.hpp")
#include "pipestudio/history/HistoryStore.hpp"
#define PIPESTUDIO_CLI_HAVE_HISTORY 1
#endif

namespace pipestudio::cli {
namespace {

// Never replaces a device, FIFO or symlink with a regular file; readers never see half a file.
Status writeTextFile(const std::string& path, const std::string& text) { return writeOutputFile(path, text); }

struct ExportOptions {
  std::string plan;
  std::optional<std::int64_t> run;
  std::string db;
  std::string format;
  std::string output;
  std::string csvFormat = "compute_only";
  std::string torchtitanConfig;  // python | toml; empty: by the output's extension
  std::string torchtitanBase;
  std::string csvOutput;  // torchtitan: where the schedule CSV goes (default: beside -o)
  std::string megatronModel = "hybrid";
  int iteration = -1;
};

// Writes `text` to -o (or stdout); "wrote …" goes to stderr when stdout carries the export.
int emit(const ExportOptions& o, const std::string& text, const std::string& what) {
  if (o.output.empty()) {
    std::cout << text << std::flush;
    return std::cout ? kExitOk : kExitFailure;
  }
  if (auto st = writeTextFile(o.output, text); !st) {
    std::cerr << "export: " << st.message() << '\n';
    return kExitFailure;
  }
  std::cout << "wrote " << o.output << " (" << what << ")\n";
  return kExitOk;
}

std::string besideOutput(const std::string& output, const std::string& extension) {
  const std::filesystem::path p(output);
  return (p.parent_path() / (p.stem().string() + extension)).string();
}

// Whether two output paths name one file: the same inode when both exist, else the same
// absolute path once symlinks are followed.
bool sameFile(const std::string& a, const std::string& b) {
  struct stat sa {};
  struct stat sb {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0) {
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  }
  std::error_code ec1;
  std::error_code ec2;
  const auto ca = std::filesystem::weakly_canonical(std::filesystem::absolute(a), ec1);
  const auto cb = std::filesystem::weakly_canonical(std::filesystem::absolute(b), ec2);
  return !ec1 && !ec2 && ca == cb;
}

// torchtitan writes two files, the configuration at -o and the schedule CSV it names. The CSV goes where
// --csv-output says, else beside the configuration (FILE.py → FILE.csv) — but never over a file the
// user did not name, never beside a device or FIFO (/dev/null.csv), never into the configuration's path.
Expected<std::string> torchtitanCsvPath(const ExportOptions& o) {
  std::string csv = o.csvOutput;
  if (csv.empty()) {
    struct stat st {};
    const bool exists = ::stat(o.output.c_str(), &st) == 0;
    // /dev/stdout and /dev/fd/N name a descriptor (which may well be a regular file).
    const bool descriptor = o.output == "/dev/stdout" || o.output == "/dev/stderr" ||
                            o.output.rfind("/dev/fd/", 0) == 0 || o.output.rfind("/proc/self/fd/", 0) == 0;
    if ((exists && !S_ISREG(st.st_mode)) || descriptor) {
      return Error{"-o " + o.output + " is not a regular file, so the schedule CSV cannot go beside it (expected " +
                   "--csv-output FILE to say where the CSV goes)"};
    }
    csv = besideOutput(o.output, ".csv");
    if (!sameFile(csv, o.output) && ::stat(csv.c_str(), &st) == 0) {
      return Error{csv +
                   " exists and is not named on the command line (the schedule CSV goes beside the configuration): "
                   "give --csv-output " +
                   csv + " to replace it, or choose another -o"};
    }
  }
  if (sameFile(csv, o.output)) {
    return Error{"the configuration (-o) and the schedule CSV would both be written to " + csv +
                 " (expected two files: -o FILE.py puts the CSV beside it as FILE.csv; --csv-output names it)"};
  }
  return csv;
}

int writeExport(const Plan& plan, const ExportOptions& o, const ChromeTraceOptions& trace) {
  const auto fail = [](const std::string& message) {
    std::cerr << "export: " << message << '\n';
    return kExitFailure;
  };
  if (o.format == "chrome" && !o.output.empty()) {
    if (auto st = writeChromeTrace(o.output, plan, trace); !st) return fail(st.message());
    std::cout << "wrote " << o.output << " (Chrome trace, " << plan.ops.size() << " ops)\n";
    return kExitOk;
  }
  if (o.format == "chrome") {
    return emit(o, chromeTraceJson(plan, trace).dump(-1, ' ', false, Json::error_handler_t::replace) + "\n",
                "Chrome trace, " + std::to_string(plan.ops.size()) + " ops");
  }
  if (o.format == "csv") {
    const CsvFormat format = csvFormatFromName(o.csvFormat).value_or(CsvFormat::ComputeOnly);
    auto text = scheduleCsv(plan, format);
    if (!text) return fail(text.message());
    return emit(o, *text, "schedule CSV " + o.csvFormat + ", " + std::to_string(plan.ops.size()) + " ops");
  }
  if (o.format == "megatron") {
    MegatronOptions megatron;
    megatron.model = megatronModelFromName(o.megatronModel).value_or(MegatronModel::Hybrid);
    auto m = megatronExport(plan, megatron);
    if (!m) return fail("Megatron-LM cannot express this plan: " + m.message());
    if (!m->missingArguments.empty()) {
      std::string flags;
      for (const std::string& f : m->missingArguments) flags += (flags.empty() ? "" : " ") + f;
      std::cerr << "export: note: Megatron-LM also requires " << flags
                << ", which a model of measured times does not give; add them to the arguments\n";
    }
    return emit(
        o, m->text,
        std::string("Megatron-LM arguments, ") +
            (m->model == MegatronModel::Hybrid ? "HybridModel (pretrain_hybrid.py)" : "GPTModel (pretrain_gpt.py)"));
  }
  // torchtitan: the configuration names the CSV, written beside it. Python (torchtitan main)
  // unless asked for TOML, or writing a .toml file (what this export wrote before).
  if (o.output.empty()) {
    std::cerr << "export --format torchtitan: give -o FILE.py (or FILE.toml with --torchtitan-config toml); the "
                 "schedule CSV is written beside it\n";
    return kExitUsage;
  }
  const std::filesystem::path out(o.output);
  TorchtitanOptions titan;
  titan.format = torchtitanFormatFromName(o.torchtitanConfig)
                     .value_or(out.extension() == ".toml" ? TorchtitanFormat::Toml : TorchtitanFormat::Python);
  const auto csv = torchtitanCsvPath(o);
  if (!csv) {
    std::cerr << "export --format torchtitan: " << csv.message() << '\n';
    return kExitUsage;
  }
  titan.csvPath = *csv;
  titan.base = o.torchtitanBase;
  titan.moduleName = out.stem().string();
  if (titan.format == TorchtitanFormat::Python && !isPythonIdentifier(titan.moduleName)) {
    std::cerr << "export --format torchtitan: " << o.output << ": torchtitan imports the configuration as module '"
              << titan.moduleName << "', which is not a Python identifier (expected a name such as plan_zb.py)\n";
    return kExitUsage;
  }
  auto t = torchtitanExport(plan, titan);
  if (!t) return fail("torchtitan cannot express this plan: " + t.message());
  // Both files or neither: a configuration that names a CSV that is not there, or a CSV without
  // its configuration, is worse than no export.
  if (auto st = writeOutputFiles({{titan.csvPath, t->csv}, {o.output, t->config}}); !st) return fail(st.message());
  for (const std::string& note : t->notes) std::cerr << "export: note: " << note << '\n';
  std::cout << "wrote " << o.output
            << (titan.format == TorchtitanFormat::Python
                    ? " (torchtitan configuration, --module " + titan.moduleName + " --config pipestudio_plan)"
                    : std::string(" (torchtitan v0.2.2 TOML job config)"))
            << " and " << titan.csvPath << " (schedule CSV, " << plan.ops.size() << " ops)\n";
  return kExitOk;
}

#ifdef PIPESTUDIO_CLI_HAVE_HISTORY
std::optional<std::string> activityCategory(history::EventCategory c) {
  switch (c) {
    case history::EventCategory::Kernel:
    case history::EventCategory::Memcpy:
    case history::EventCategory::Memset:
    case history::EventCategory::Nccl:
      return std::string(history::eventCategoryName(c));
    default:
      return std::nullopt;  // op ranges are the plan's ops; host ranges are not device lanes
  }
}

int exportRun(const ExportOptions& o) {
  const std::string db = o.db.empty() ? history::defaultHistoryPath() : o.db;
  history::OpenOptions open;
  open.readOnly = true;
  auto store = history::HistoryStore::open(db, open);
  if (!store) {
    std::cerr << "export: " << db << ": " << store.message() << '\n';
    return kExitFailure;
  }
  if (o.format == "megatron" || o.format == "torchtitan") {
    std::cerr << "export --run: " << o.format << " exports plans (give a plan file)\n";
    return kExitUsage;
  }
  // CSV holds one iteration's order; measured runs repeat it, so take the first unless told.
  const int iteration = o.iteration >= 0 ? o.iteration : (o.format == "csv" ? 0 : -1);
  auto plan = store->runAsPlan(*o.run, iteration);
  if (plan && plan->ops.empty() && iteration == 0 && o.iteration < 0) plan = store->runAsPlan(*o.run, -1);
  if (!plan) {
    std::cerr << "export: " << db << ": run " << *o.run << ": " << plan.message() << '\n';
    return kExitFailure;
  }
  if (plan->ops.empty()) {
    std::cerr << "export: " << db << ": run " << *o.run << " has no measured op ranges"
              << (iteration >= 0 ? " in iteration " + std::to_string(iteration) : std::string()) << '\n';
    return kExitFailure;
  }
  ChromeTraceOptions trace;
  trace.title = "run " + std::to_string(*o.run);
  if (o.format == "chrome") {
    auto events = store->loadEvents(*o.run);
    if (!events) {
      std::cerr << "export: " << db << ": run " << *o.run << ": " << events.message() << '\n';
      return kExitFailure;
    }
    // runAsPlan's times start at the first op range (of the chosen iteration); kernels follow it.
    std::int64_t originNs = INT64_MAX;
    for (const auto& e : *events) {
      if (e.category != history::EventCategory::Op || e.device < 0 || e.kind < 0) continue;
      if (iteration >= 0 && e.iteration != iteration) continue;
      originNs = std::min(originNs, e.startNs);
    }
    for (const auto& e : *events) {
      const auto category = activityCategory(e.category);
      if (!category || e.device < 0 || originNs == INT64_MAX) continue;
      const double startMs = static_cast<double>(e.startNs - originNs) / 1e6;
      trace.activities.push_back({e.device, static_cast<int>(e.stream), e.name, *category, startMs,
                                  startMs + static_cast<double>(e.durationNs) / 1e6});
    }
  }
  return writeExport(*plan, o, trace);
}
#endif

int runExport(const ExportOptions& o) {
  if (o.megatronModel != "hybrid" && o.format != "megatron") {
    std::cerr << "export: --megatron-model names the model of --format megatron (this is --format " << o.format
              << ")\n";
    return kExitUsage;
  }
  if (!o.csvOutput.empty() && o.format != "torchtitan") {
    std::cerr << "export: --csv-output names the schedule CSV of --format torchtitan (this is --format " << o.format
              << "; -o names its output)\n";
    return kExitUsage;
  }
  if (o.plan.empty() == !o.run.has_value()) {
    std::cerr << "export: give either a PLAN file or --run ID (not both)\n";
    return kExitUsage;
  }
  if (o.run) {
#ifdef PIPESTUDIO_CLI_HAVE_HISTORY
    return exportRun(o);
#else
    std::cerr << "export --run: this build has no history module (core/history), which measured runs come from\n";
    return kExitFailure;
#endif
  }
  auto plan = loadValidPlan(o.plan);
  if (!plan) return kExitFailure;
  return writeExport(*plan, o, {"plan " + plan->config.schedule, {}});
}

}  // namespace

void addExportCommand(CLI::App& root, int& exitCode) {
  static ExportOptions o;
  auto* cmd = root.add_subcommand("export",
                                  "Export a plan or a measured run: Chrome trace JSON, schedule CSV, Megatron-LM "
                                  "arguments or a torchtitan configuration");
  cmd->add_option("plan", o.plan, "Plan file (pipestudio.plan/1)");
  cmd->add_option("--run", o.run, "Measured run id in the history database")->check(intIn(1, INT64_MAX));
  cmd->add_option("--db", o.db, "History database (default: the GUI's)")->check(nonEmptyPath());
  cmd->add_option("--iteration", o.iteration, "Measured runs: keep one iteration (csv default: 0)")
      ->check(intIn(0, 1 << 30));
  cmd->add_option("--format", o.format,
                  "chrome (Perfetto trace JSON), csv (torch.distributed.pipelining), megatron (Megatron-LM arguments) "
                  "or torchtitan (its configuration and the schedule CSV beside it)")
      ->required()
      ->check(CLI::IsMember({"chrome", "csv", "megatron", "torchtitan"}));
  cmd->add_option(
         "--csv-format", o.csvFormat,
         "csv: compute_only (F/I/W/B) or compute_comms (with SEND/RECV as _PipelineScheduleRuntime lowers them)")
      ->check(CLI::IsMember({"compute_only", "compute_comms"}));
  cmd->add_option("--megatron-model", o.megatronModel,
                  "megatron: hybrid (HybridModel, --hybrid-layer-pattern: Megatron-LM since July 2026; default) or gpt "
                  "(GPTModel, --pipeline-model-parallel-layout: older Megatron-LM)")
      ->check(CLI::IsMember({"hybrid", "gpt"}));
  cmd->add_option("--torchtitan-config", o.torchtitanConfig,
                  "torchtitan: python (a --module/--config configuration, torchtitan main; default) or toml (the job "
                  "config of torchtitan v0.2.2 and earlier; default for a .toml output)")
      ->check(CLI::IsMember({"python", "toml"}));
  cmd->add_option("--torchtitan-base", o.torchtitanBase,
                  "torchtitan python: MODULE:FUNCTION of the configuration the plan starts from (its model, data, "
                  "optimizer; default: the one torchtitan ships for the model, if any)")
      ->check(CLI::Validator(
          [](std::string& text) {
            const auto colon = text.find(':');
            return colon == std::string::npos || colon == 0 || colon + 1 == text.size()
                       ? "'" + text +
                             "' (expected MODULE:FUNCTION, e.g. torchtitan.models.llama3.config_registry:llama3_8b)"
                       : std::string();
          },
          "MODULE:FUNCTION", "torchtitanBase"));
  cmd->add_option("-o,--output", o.output, "Output file (default: stdout; torchtitan needs one)")
      ->check(nonEmptyPath());
  cmd->add_option("--csv-output", o.csvOutput,
                  "torchtitan: the schedule CSV the TOML names (default: beside -o as FILE.csv, where no file is yet)")
      ->check(nonEmptyPath());
  cmd->callback([&exitCode] { exitCode = runExport(o); });
}

}  // namespace pipestudio::cli
