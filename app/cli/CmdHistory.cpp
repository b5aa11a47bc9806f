// pipestudio-cli history [--db DB] list|show ID|compare A B|import FILE [--json]  (docs/cli.md)
// plus rename/note/delete for scripts. Reads and writes the run history (core/history).

#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <string>

#include "Commands.hpp"
#include "Flags.hpp"
#include "Output.hpp"
#include "pipestudio/common/Files.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/history/Compare.hpp"
#include "pipestudio/history/HistoryStore.hpp"
#include "pipestudio/history/TraceImport.hpp"
#include "pipestudio/plan/PlanIO.hpp"

namespace pipestudio::cli {
namespace {

using namespace pipestudio::history;

struct HistoryOptions {
  std::string db;
  bool json = false;
  std::string idA;
  std::string idB;
  std::string file;
  std::vector<std::string> files;
  std::string planFile;
  std::string opPattern;
  std::string name;
  std::string text;
};

HistoryOptions& options() {
  static HistoryOptions o;
  return o;
}

// A run or plan id: any positive int64 (the ids SQLite gives, up to 2^63 − 1), checked by the one
// rule every integer argument follows (NumberArg.hpp).
std::optional<RunId> parseId(const std::string& text) {
  auto v = parseIntegerArg("", text, 1, std::numeric_limits<RunId>::max());
  return v ? std::optional<RunId>(*v) : std::nullopt;
}

int fail(const std::string& message) {
  std::cerr << "pipestudio-cli history: " << message << '\n';
  return kExitFailure;
}

int usage(const std::string& message) {
  std::cerr << "pipestudio-cli history: " << message << '\n';
  return kExitUsage;
}

std::string storePath() { return options().db.empty() ? defaultHistoryPath() : options().db; }

// Read commands open the database read-only (a read-only file or mount can still be listed) and
// create nothing: not the database, not its folder. Write commands create the default location's
// folders, never those of a --db path (a typo stays an error).
Expected<HistoryStore> openStore(bool write = true) {
  const std::string path = storePath();
  OpenOptions open;
  open.readOnly = !write;
  open.createDirectories = options().db.empty();
  auto store = HistoryStore::open(path, open);
  // An older schema needs one read-write open to migrate.
  if (!store && !write && store.message().find("needs a migration") != std::string::npos) {
    OpenOptions migrate;
    migrate.createDirectories = false;
    return HistoryStore::open(path, migrate);
  }
  return store;
}

// Whether the database exists yet (a read of a history nothing was recorded in lists no runs).
bool storeExists() {
  const std::string path = storePath();
  std::error_code ec;
  return !path.empty() && std::filesystem::exists(path, ec);
}

// A read of a run in a database not yet made: the run is not there, and nothing is created.
int noRunYet(RunId id) {
  return fail(storePath() + ": no run with id " + std::to_string(id) + " (no history database there yet)");
}

// Names, notes and errors are user text: one line each, whatever they contain.
std::string shown(const std::string& text) { return excerpt(text, 200); }

void printSummaryText(const RunSummary& s) {
  std::cout << "run " << s.id << "  " << shown(s.name) << '\n'
            << "  status     " << runStatusName(s.status) << (s.error.empty() ? "" : "  (" + shown(s.error) + ")")
            << '\n'
            << "  created    " << formatUnixMs(s.createdUnixMs) << '\n'
            << "  events     " << s.events << " on " << s.devices << " device(s), " << s.durationMs << " ms\n"
            << "  plan       " << (s.planId ? std::to_string(*s.planId) : "-") << '\n'
            << "  source     " << shown(s.source) << (s.sourcePath.empty() ? "" : " " + shown(s.sourcePath)) << '\n';
  if (!s.host.empty() || !s.gpu.empty())
    std::cout << "  host/gpu   " << shown(s.host) << " " << shown(s.backend) << " " << shown(s.gpu) << '\n';
  if (!s.notes.empty()) std::cout << "  notes      " << shown(s.notes) << '\n';
}

int runList() {
  if (!storePath().empty() && !storeExists()) {
    if (options().json) {
      std::cout << "[]\n";
    } else {
      std::cout << "no runs in " << storePath() << " (no history database there yet)\n";
    }
    return kExitOk;
  }
  auto store = openStore(false);
  if (!store) return fail(store.message());
  auto runs = store->listRuns();
  if (!runs) return fail(runs.message());
  if (options().json) {
    Json out = Json::array();
    for (const auto& r : *runs) out.push_back(runSummaryToJson(r));
    std::cout << out.dump(2) << '\n';
    return kExitOk;
  }
  if (runs->empty()) {
    std::cout << "no runs in " << store->path() << '\n';
    return kExitOk;
  }
  for (const auto& r : *runs) {
    std::cout << r.id << '\t' << runStatusName(r.status) << '\t' << formatUnixMs(r.createdUnixMs) << '\t' << r.events
              << " events\t" << (r.planId ? "plan " + std::to_string(*r.planId) : "no plan") << '\t' << shown(r.name)
              << '\n';
  }
  return kExitOk;
}

// What a read of one run starts from: the run the command names first (`idA`) and the store,
// opened read-only; where either is missing, `store` is empty and `exitCode` says why (a usage
// error, no database yet, a store that does not open).
struct RunRead {
  RunId id = 0;
  std::optional<HistoryStore> store;
  int exitCode = kExitOk;
};

RunRead openRunRead() {
  RunRead r;
  const auto id = parseId(options().idA);
  if (!id) {
    r.exitCode =
        usage("run id '" + excerpt(options().idA) + "' is not a positive integer (expected 1 to 9223372036854775807)");
  } else if (!storePath().empty() && !storeExists()) {
    r.exitCode = noRunYet(*id);
  } else if (auto store = openStore(false); !store) {
    r.exitCode = fail(store.message());
  } else {
    r.id = *id;
    r.store = std::move(*store);
  }
  return r;
}

int runShow() {
  RunRead run = openRunRead();
  if (!run.store) return run.exitCode;
  auto s = run.store->runSummary(run.id);
  if (!s) return fail(s.message());
  auto idle = idleBreakdown(*run.store, run.id);
  if (!idle) return fail(idle.message());
  if (options().json) {
    Json out = runSummaryToJson(*s);
    out["idle"] = idleBreakdownToJson(*idle);
    std::cout << out.dump(2) << '\n';
    return kExitOk;
  }
  printSummaryText(*s);
  if (!idle->empty()) {
    std::cout << "\n  idle breakdown per device (ms): busy, communication, dependency wait, host wait, bubble\n";
    for (const auto& r : *idle) {
      std::cout << "  device " << r.device << ": " << r.busyMs << ", " << r.communicationMs << ", "
                << r.dependencyWaitMs << ", " << r.hostWaitMs << ", " << r.bubbleMs << '\n';
    }
  }
  return kExitOk;
}

int runCompare() {
  RunRead run = openRunRead();
  if (!run.store) return run.exitCode;
  // B may be another run, "plan" (A's linked plan) or "plan:ID".
  if (options().idB == "plan" || options().idB.rfind("plan:", 0) == 0) {
    std::optional<PlanId> plan;
    if (options().idB != "plan") {
      plan = parseId(options().idB.substr(5));
      if (!plan)
        return usage("plan id in '" + excerpt(options().idB) +
                     "' is not a positive integer (expected 1 to 9223372036854775807)");
    }
    auto c = compareRunToPlan(*run.store, run.id, plan);
    if (!c) return fail(c.message());
    if (options().json) {
      Json out = planComparisonToJson(*c);
      if (auto idle = idleBreakdown(*run.store, run.id)) out["idle"] = idleBreakdownToJson(*idle);
      std::cout << out.dump(2) << '\n';
    } else {
      std::cout << planComparisonTable(*c);
    }
    return kExitOk;
  }
  const auto b = parseId(options().idB);
  if (!b)
    return usage("run id '" + excerpt(options().idB) +
                 "' is not a positive integer (expected 1 to 9223372036854775807, or 'plan', 'plan:ID')");
  auto c = compareRuns(*run.store, run.id, *b);
  if (!c) return fail(c.message());
  if (options().json) {
    std::cout << comparisonToJson(*c).dump(2) << '\n';
  } else {
    std::cout << comparisonTable(*c);
  }
  return kExitOk;
}

int runImport() {
  const auto& files = options().files;
  if (!options().opPattern.empty()) {
    if (auto st = checkOpPattern(options().opPattern); !st) return usage(st.message());
  }
  for (const std::string& file : files) {
    if (auto st = checkRegularFile(file); !st) return fail(st.message());  // a FIFO would hang the open
  }
  std::optional<Plan> plan;
  if (!options().planFile.empty()) {
    auto p = loadPlan(options().planFile);
    if (!p) return fail(p.message());
    plan = std::move(*p);
  }
  auto store = openStore();
  if (!store) return fail(store.message());
  TraceImportOptions import;
  import.info.name = options().name;
  import.opPattern = options().opPattern;
  if (plan) import.plan = &*plan;
  auto result = importTraces(*store, files, import);
  if (!result) return fail(result.message());
  // The plan is stored once the run is (a failed import leaves the history as it was).
  if (plan) {
    auto id = store->addPlan(*plan, options().planFile);
    if (!id) return fail(id.message());
    if (auto st = store->linkRunToPlan(result->runId, *id); !st) return fail(st.message());
  }
  for (const std::string& note : result->notes) std::cerr << "pipestudio-cli history import: " << note << '\n';
  if (result->skipped > 0 || result->firstError) {
    std::cerr << "pipestudio-cli history import: stored " << result->events << " event(s), skipped " << result->skipped
              << (result->firstError ? "; first problem: " + *result->firstError : "") << '\n';
  }
  if (plan && result->matchedOps == 0) {
    std::cerr << "pipestudio-cli history import: no measured op matched the plan's ops (" << result->measuredOps
              << " op range(s) found"
              << (result->measuredOps == 0 ? "; the trace has no PP:<action> annotations or --op-pattern matches" : "")
              << ")\n";
  }
  noteOutputCarries("the traces are stored as run " + std::to_string(result->runId));
  if (options().json) {
    std::cout << Json{{"id", result->runId},
                      {"events", result->events},
                      {"matched_ops", result->matchedOps},
                      {"measured_ops", result->measuredOps},
                      {"skipped", result->skipped}}
                     .dump()
              << '\n';
  } else {
    std::cout << result->runId << '\n';
  }
  return kExitOk;
}

int runEdit(const char* what) {
  const auto id = parseId(options().idA);
  if (!id)
    return usage("run id '" + excerpt(options().idA) +
                 "' is not a positive integer (expected 1 to 9223372036854775807)");
  auto store = openStore();
  if (!store) return fail(store.message());
  Status st;
  if (std::string_view(what) == "rename") {
    st = store->renameRun(*id, options().text);
  } else if (std::string_view(what) == "note") {
    st = store->annotateRun(*id, options().text);
  } else {
    st = store->deleteRun(*id);
  }
  if (!st) return fail(st.message());
  if (options().json) std::cout << Json{{"id", *id}}.dump() << '\n';
  return kExitOk;
}

void addCommon(CLI::App* sub) {
  sub->add_option("--db", options().db, "History database (default: $XDG_DATA_HOME/pipestudio/history.sqlite)")
      ->check(nonEmptyPath());
  sub->add_flag("--json", options().json, "Print one JSON document on stdout");
}

}  // namespace

void addHistoryCommand(CLI::App& root, int& exitCode) {
  auto* cmd = root.add_subcommand("history", "Recorded runs: list, show, compare, import");
  addCommon(cmd);
  cmd->require_subcommand(1);

  auto* list = cmd->add_subcommand("list", "List runs, newest first");
  addCommon(list);
  list->callback([&exitCode] { exitCode = runList(); });

  auto* show = cmd->add_subcommand("show", "Show one run with its idle-time breakdown");
  show->add_option("id", options().idA, "Run id")->required();
  addCommon(show);
  show->callback([&exitCode] { exitCode = runShow(); });

  auto* compare = cmd->add_subcommand("compare", "Compare run A with run B, or with its plan (B = plan | plan:ID)");
  compare->add_option("a", options().idA, "Run id")->required();
  compare->add_option("b", options().idB, "Run id, 'plan' or 'plan:ID'")->required();
  addCommon(compare);
  compare->callback([&exitCode] { exitCode = runCompare(); });

  auto* import = cmd->add_subcommand(
      "import",
      "Import traces as one run: PyTorch profiler (Kineto) JSON or .json.gz and Nsight Systems SQLite "
      "exports, one file per rank; Megatron-LM's OpenTelemetry spans, OTLP/JSON one file per rank or one "
      "Jaeger JSON export of all ranks; or a PipeStudio trace stream");
  import->add_option("files", options().files, "Trace files (one per rank; a Jaeger export holds all ranks)")
      ->required();
  import->add_option("--plan", options().planFile,
                     "Plan file the run executed (stored and linked; places annotated stages)");
  import->add_option("--op-pattern", options().opPattern,
                     "Regular expression (PCRE2) naming ops, with named groups stage, kind and microbatch "
                     "(default: torch.distributed.pipelining's PP:<stage><kind><microbatch>)");
  import->add_option("--name", options().name, "Name of the new run");
  addCommon(import);
  import->callback([&exitCode] { exitCode = runImport();
});

auto* rename = cmd->add_subcommand("rename", "Rename a run");
rename->add_option("id", options().idA, "Run id")->required();
rename->add_option("name", options().text, "New name")->required();
addCommon(rename);
rename->callback([&exitCode] { exitCode = runEdit("rename"); });

auto* note = cmd->add_subcommand("note", "Set a run's notes");
note->add_option("id", options().idA, "Run id")->required();
note->add_option("text", options().text, "Notes")->required();
addCommon(note);
note->callback([&exitCode] { exitCode = runEdit("note"); });

auto* del = cmd->add_subcommand("delete", "Delete a run and its events");
del->add_option("id", options().idA, "Run id")->required();
addCommon(del);
del->callback([&exitCode] { exitCode = runEdit("delete"); });
}  // namespace pipestudio::cli

}  // namespace pipestudio::cli
