#include <algorithm>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "Commands.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "pipestudio/planner/Partition.hpp"

namespace pipestudio::cli {
namespace {

// The `solver` block of a workspace: the settings of `pipestudio-cli plan`.
void checkSolver(JsonReader& r, const JsonNode& s, const std::optional<ClusterSpec>& cluster) {
  r.rejectUnknown(s, {"schedule", "devices", "microbatches", "chunks", "partition", "fill", "memory_limit_bytes"});
  (void)r.string(s, "schedule", Presence::Optional);
  const auto devices = r.integer(s, "devices", Presence::Optional, 1, 1'000'000);
  (void)r.integer(s, "microbatches", Presence::Optional, 1, 1'000'000);
  (void)r.integer(s, "chunks", Presence::Optional, 1, 1024);
  (void)r.integer(s, "memory_limit_bytes", Presence::Optional, 1, std::int64_t{1} << 60);
  if (auto p = r.string(s, "partition", Presence::Optional)) {
    if (const auto names = partitionNames(); std::find(names.begin(), names.end(), *p) == names.end()) {
      r.error(s.child("partition"),
              "'" + excerpt(*p) + "' is not a partitioner (expected " + choiceList(partitionNames()) + ")");
    }
  }
  if (auto f = r.string(s, "fill", Presence::Optional)) {
    if (const auto modes = fillModeNames(); std::find(modes.begin(), modes.end(), *f) == modes.end())
      r.error(s.child("fill"),
              "'" + excerpt(*f) + "' is not a fill mode (expected " + choiceList(fillModeNames()) + ")");
  }
  if (devices && cluster && *devices > cluster->totalGpus()) {
    r.error(s.child("devices"), "is " + std::to_string(*devices) + " but the cluster has " +
                                    std::to_string(cluster->totalGpus()) + " GPUs (expected at most that many)");
  }
}

// Validates one file of any PipeStudio kind; prints a one-line summary or every problem.
bool validateFile(const std::string& path) {
  auto doc = loadJsonFile(path);
  if (!doc) {
    std::cerr << doc.message() << '\n';
    return false;
  }
  auto kind = documentKind(*doc);
  if (!kind) {
    std::cerr << kind.message() << '\n';
    return false;
  }
  JsonReader reader(*doc);
  std::string summary;
  if (*kind == "model") {
    if (auto m = readModel(reader, reader.root())) {
      std::size_t layers = 0;
      for (const auto& c : m->components) layers += c.layers.size();
      summary = "model '" + excerpt(m->name) + "', " + std::to_string(m->components.size()) + " component(s), " +
                std::to_string(layers) + " layer(s)";
    }
  } else if (*kind == "cluster") {
    if (auto c = readCluster(reader, reader.root())) {
      summary = "cluster '" + excerpt(c->name) + "', " + std::to_string(c->nodes.size()) + " node(s), " +
                std::to_string(c->totalGpus()) + " GPU(s)";
    }
  } else if (*kind == "hosts") {
    if (auto h = readHosts(reader, reader.root())) {
      summary = "hosts, " + std::to_string(h->hosts.size()) + " host(s), " + std::to_string(h->totalGpus()) + " GPU(s)";
    }
  } else if (*kind == "plan") {
    if (auto p = readPlan(reader, reader.root())) {
      if (auto st = validatePlanStructure(*p); !st) {
        std::cerr << locatePlanProblem(*doc, st.message()) << '\n';
        return false;
      }
      summary = "plan '" + excerpt(p->config.schedule) + "', " + std::to_string(p->config.devices) + " device(s), " +
                std::to_string(p->ops.size()) + " op(s)";
    }
  } else if (*kind == "workspace") {
    // A workspace embeds a model and a cluster; both are checked with their own rules
    // (resources/README.md describes the format).
    const JsonNode root = reader.root();
    reader.rejectUnknown(root, {"schema", "name", "description", "model", "cluster", "solver"});
    if (reader.checkSchema(root, "pipestudio.workspace/1")) {
      std::optional<ModelSpec> model;
      std::optional<ClusterSpec> cluster;
      if (auto m = reader.field(root, "model", Presence::Required)) model = readModel(reader, *m);
      if (auto c = reader.field(root, "cluster", Presence::Required)) cluster = readCluster(reader, *c);
      if (auto s = reader.object(root, "solver", Presence::Optional)) checkSolver(reader, *s, cluster);
      summary = "workspace '" + excerpt(reader.string(root, "name", Presence::Optional).value_or("")) + "'";
      if (model) summary += ", model '" + excerpt(model->name) + "'";
      if (cluster) summary += ", cluster '" + excerpt(cluster->name) + "'";
    }
  }
  if (!reader.ok()) {
    for (const auto& e : reader.errors()) std::cerr << e << '\n';
    return false;
  }
  std::cout << path << ": ok (" << summary << ")\n";
  return true;
}

}  // namespace

void addValidateCommand(CLI::App& root, int& exitCode) {
  auto* cmd = root.add_subcommand("validate", "Check model, cluster, plan, hosts or workspace files");
  static std::vector<std::string> files;
  cmd->add_option("files", files, "Files to check")->required();
  cmd->callback([&exitCode] {
    bool allOk = true;
    for (const auto& f : files) allOk = validateFile(f) && allOk;
    exitCode = allOk ? kExitOk : kExitFailure;
  });
}

}  // namespace pipestudio::cli
