#include <iostream>
#include <string>

#include "Commands.hpp"
#include "PlanSummary.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/planner/AutoSchedule.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Schedules.hpp"

namespace pipestudio::cli {
namespace {

struct PlanOptions {
  std::string model, cluster, schedule, partition = "uniform", fill = "none", memoryLimit, output;
  int devices = 0, microbatches = 0, chunks = 0;
  bool json = false;
  std::string csv;               // custom: the schedule CSV ("auto" helper)
  bool exact = false;            // zb-auto: ILP through CBC ("auto" helper)
  double exactTimeLimitS = 30;
};

int runPlan(const PlanOptions& o) {
  auto model = loadModel(o.model);
  if (!model) {
    std::cerr << model.message() << '\n';
    return kExitFailure;
  }
  auto cluster = loadCluster(o.cluster);
  if (!cluster) {
    std::cerr << cluster.message() << '\n';
    return kExitFailure;
  }
  PlanRequest request;
  request.model = std::move(*model);
  request.cluster = std::move(*cluster);
  PlanConfig& cfg = request.config;
  cfg.schedule = o.schedule;
  cfg.devices = o.devices;
  cfg.microbatches = o.microbatches;
  cfg.partition = o.partition;
  cfg.fill = o.fill;
  const ScheduleGenerator* generator = findScheduleGenerator(o.schedule);
  cfg.chunksPerDevice = o.chunks > 0 ? o.chunks : (generator ? generator->defaultChunksPerDevice() : 1);
  if (!o.memoryLimit.empty()) {
    auto bytes = parseBytes(o.memoryLimit);
    if (!bytes) {
      std::cerr << "--memory-limit: " << bytes.message() << '\n';
      return kExitFailure;
    }
    cfg.memoryLimitBytes = *bytes;
  }
  // zb-auto and custom take extra inputs (AutoSchedule.hpp); every other schedule is makePlan.
  if ((!o.csv.empty() && o.schedule != "custom") || (o.exact && o.schedule != "zb-auto")) {
    std::cerr << "plan: --csv applies to --schedule custom, --exact to --schedule zb-auto\n";
    return kExitUsage;
  }
  AutoScheduleReport autoReport;
  Expected<Plan> plan = Error{"no plan"};
  if (o.schedule == "custom" && !o.csv.empty()) {
    auto text = readScheduleCsvFile(o.csv);
    if (!text) {
      std::cerr << "plan: " << text.message() << '\n';
      return kExitFailure;
    }
    plan = makeCustomPlan(request, *text, o.csv);
  } else if (o.schedule == "zb-auto") {
    AutoScheduleOptions autoOptions;
    autoOptions.exact = o.exact;
    autoOptions.exactTimeLimitS = o.exactTimeLimitS;
    plan = makeAutoPlan(request, autoOptions, &autoReport);
  } else {
    plan = makePlan(request);
  }
  if (!plan) {
    std::cerr << "plan: " << plan.message() << '\n';
    return kExitFailure;
  }
  if (!o.output.empty()) {
    if (auto st = savePlan(o.output, *plan); !st) {
      std::cerr << o.output << ": " << st.message() << '\n';
      return kExitFailure;
    }
  }
  if (o.json) {
    Json summary = planSummaryJson(*plan);
    if (o.schedule == "zb-auto") summary["zb_auto"] = autoScheduleReportJson(autoReport);
    std::cout << summary.dump(2) << '\n';
  } else {
    printPlanSummary(*plan, std::cout);
    if (o.schedule == "zb-auto") std::cout << formatAutoScheduleReport(autoReport);
    if (!o.output.empty()) std::cout << "plan written to " << o.output << '\n';
  }
  return kExitOk;
}

}  // namespace

void addPlanCommand(CLI::App& root, int& exitCode) {
  static PlanOptions o;
  auto* cmd = root.add_subcommand("plan", "Partition, schedule and simulate a model on a cluster");
  cmd->add_option("--model", o.model, "Model file (pipestudio.model/1)")->required();
  cmd->add_option("--cluster", o.cluster, "Cluster file (pipestudio.cluster/1)")->required();
  cmd->add_option("--schedule", o.schedule, "Schedule name (see `schedules`)")->required();
  cmd->add_option("--devices", o.devices, "Pipeline devices")->required();
  cmd->add_option("--microbatches", o.microbatches, "Microbatches per iteration")->required();
  cmd->add_option("--chunks", o.chunks, "Virtual stages per device (default: the schedule's)");
  cmd->add_option("--partition", o.partition, "uniform|balanced|dp|diffusionpipe");
  cmd->add_option("--fill", o.fill, "none|greedy");
  cmd->add_option("--memory-limit", o.memoryLimit, "Per-device memory limit, bytes or e.g. 40GiB");
  cmd->add_option("-o,--output", o.output, "Write the plan document here");
  cmd->add_flag("--json", o.json, "Print config and metrics as one JSON document");
  cmd->add_option("--csv", o.csv, "custom: per-device order from a torch.distributed.pipelining schedule CSV");
  cmd->add_flag("--exact", o.exact, "zb-auto: also solve exactly (ILP through CBC; p <= 4, m <= 8)");
  cmd->add_option("--exact-time-limit", o.exactTimeLimitS, "zb-auto --exact: seconds for the ILP (default 30)");
  cmd->callback([&exitCode] { exitCode = runPlan(o); });
}

}  // namespace pipestudio::cli
