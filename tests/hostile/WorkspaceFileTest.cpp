// Issue 44: workspaces (resources/README.md) are read by one reader, so `validate` accepts what
// the format documents and `run` runs exactly what `validate` accepts: a workspace saved with its
// plan and every documented solver field is valid and runs; an unknown schedule, another version
// of the format, or a model that is not an object is refused by both.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "Spawn.hpp"
#include "pipestudio/common/Json.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasValue;

using namespace hostile;
using pipestudio::Json;

namespace {

Json readJson(const std::string& path) {
  auto doc = pipestudio::loadJsonFile(path);
  EXPECT_THAT(doc, HasValue());
  return doc ? doc->root : Json();
}

// A workspace as the GUI saves it: the documented solver fields, a description and the plan.
Json savedWorkspace() {
  Json ws;
  ws["schema"] = "pipestudio.workspace/1";
  ws["name"] = "tiny";
  ws["description"] = "a workspace with every documented field";
  ws["model"] = readJson(kGood + "tiny-model.json");
  ws["cluster"] = readJson(kGood + "tiny-cluster.json");
  ws["solver"] = Json{{"schedule", "1f1b"},
                      {"devices", 2},
                      {"microbatches", 2},
                      {"chunks", 1},
                      {"partition", "balanced"},
                      {"fill", "none"},
                      {"memory_limit", "40GiB"},
                      {"tp", 1},
                      {"cp", 1},
                      {"ep", 1},
                      {"dp", 1},
                      {"sequence_parallel", false},
                      {"recompute", "none"},
                      {"zero", 0},
                      {"overlap_grad_reduce", true},
                      {"optimizer_sync", "global"},
                      {"precision", "bf16"},
                      {"grad_reduce_dtype", "bf16"},
                      {"attention_backend", "fused"},
                      {"cp_comm_type", "p2p"}};
  ws["plan"] = readJson(kGood + "tiny-plan.json");
  return ws;
}

std::string write(const std::string& name, const Json& j) {
  const std::string path = (tempDir() / name).string();
  spit(path, j.dump(1));
  return path;
}

std::string db(const std::string& name) { return (tempDir() / (name + ".sqlite")).string(); }

}  // namespace

TEST(WorkspaceFile, ASavedWorkspaceWithItsPlanValidatesAndRuns) {
  const std::string path = write("saved.pipestudio", savedWorkspace());
  const auto v = cli({"validate", path});
  EXPECT_EQ(v.exitCode, 0) << v.err;
  EXPECT_NE(v.out.find("ok (workspace 'tiny'"), std::string::npos) << v.out;
  const auto r = cli({"run", path, "--backend", "cpu", "--history", db("saved")});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  // Without a solver block (the docs make it optional) it is still a workspace.
  Json bare = savedWorkspace();
  bare.erase("solver");
  EXPECT_EQ(cli({"validate", write("bare.pipestudio", bare)}).exitCode, 0);
}

TEST(WorkspaceFile, WhatValidateRefusesRunRefusesWithTheSameMessage) {
  struct Case {
    const char* name;
    Json workspace;
    const char* why;
  };
  Json nope = savedWorkspace();
  nope["solver"]["schedule"] = "nope";
  Json v2 = savedWorkspace();
  v2["schema"] = "pipestudio.workspace/2";
  Json stringModel = savedWorkspace();
  stringModel["model"] = "tiny-model.json";
  Json editedPlan = savedWorkspace();
  editedPlan["plan"]["config"]["microbatches"] = 1000;
  for (const Case& c : {Case{"nope", nope, "/solver/schedule: 'nope' is not a schedule"}, Case{"v2", v2, "/schema"},
                        Case{"string-model", stringModel, "/model"},
                        Case{"edited-plan", editedPlan, "/plan/config/microbatches: 1000, but no op runs"}}) {
    const std::string path = write(std::string(c.name) + ".pipestudio", c.workspace);
    const auto v = cli({"validate", path});
    EXPECT_EQ(v.exitCode, 1) << c.name << ": " << v.out;
    EXPECT_NE(v.err.find(c.why), std::string::npos) << c.name << ": " << v.err;
    const auto r = cli({"run", path, "--backend", "cpu", "--history", db(c.name)});
    EXPECT_EQ(r.exitCode, 1) << c.name << ": " << r.out;
    EXPECT_NE(r.err.find(c.why), std::string::npos) << c.name << ": " << r.err;
    EXPECT_EQ(r.out, "") << c.name << ": a run was recorded";
  }
}
