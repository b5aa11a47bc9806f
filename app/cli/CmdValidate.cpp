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
#include "pipestudio/planner/SolverNames.hpp"
#include "pipestudio/workspace/Workspace.hpp"

namespace pipestudio::cli {
namespace {

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
    // The format's one reader, the GUI's and `run`'s (resources/README.md describes it).
    auto ws = readWorkspace(*doc, solverNames());
    if (!ws) {
      std::cerr << ws.message() << '\n';
      return false;
    }
    summary = "workspace '" + excerpt(ws->name) + "', model '" + excerpt(ws->model.name) + "', cluster '" +
              excerpt(ws->cluster.name) + "'" +
              (ws->plan ? ", plan of " + std::to_string(ws->plan->ops.size()) + " op(s)" : std::string());
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
