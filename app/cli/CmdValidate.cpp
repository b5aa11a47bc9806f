#include <iostream>
#include <string>
#include <vector>

#include "Commands.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/PlanIO.hpp"

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
      summary = "model '" + m->name + "', " + std::to_string(m->components.size()) + " component(s), " +
                std::to_string(layers) + " layer(s)";
    }
  } else if (*kind == "cluster") {
    if (auto c = readCluster(reader, reader.root())) {
      summary = "cluster '" + c->name + "', " + std::to_string(c->nodes.size()) + " node(s), " +
                std::to_string(c->totalGpus()) + " GPU(s)";
    }
  } else if (*kind == "hosts") {
    if (auto h = readHosts(reader, reader.root())) {
      summary = "hosts, " + std::to_string(h->hosts.size()) + " host(s), " + std::to_string(h->totalGpus()) + " GPU(s)";
    }
  } else if (*kind == "plan") {
    if (auto p = readPlan(reader, reader.root())) {
      if (auto st = validatePlanStructure(*p); !st) {
        std::cerr << path << ": " << st.message() << '\n';
        return false;
      }
      summary = "plan '" + p->config.schedule + "', " + std::to_string(p->config.devices) + " device(s), " +
                std::to_string(p->ops.size()) + " op(s)";
    }
  } else if (*kind == "workspace") {
    // A workspace embeds a model and a cluster; both are checked with their own rules.
    const JsonNode root = reader.root();
    if (!reader.checkSchema(root, "pipestudio.workspace/1")) {
      // reported by checkSchema
    } else {
      if (auto m = reader.field(root, "model", Presence::Required)) (void)readModel(reader, *m);
      if (auto c = reader.field(root, "cluster", Presence::Required)) (void)readCluster(reader, *c);
      summary = "workspace";
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
