// The launcher sections of a hosts file (issue 17): `slurm`, `mpirun`, keepalive. Good files
// round-trip through hostsToJson; every mistake is named with its JSON pointer, line and what
// was expected.
#include <gtest/gtest.h>

#include <regex>
#include <vector>

#include "pipestudio/common/JsonReader.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

Expected<HostsSpec> parseHosts(const std::string& text) {
  PS_ASSIGN_OR_RETURN(auto doc, parseJson(text, "hosts.json"));
  JsonReader reader(doc);
  auto hosts = readHosts(reader, reader.root());
  if (!reader.ok() || !hosts) return reader.toError();
  return *hosts;
}

std::string withLauncher(const std::string& launcher, const std::string& sections) {
  return R"({"schema": "pipestudio.hosts/1", "launcher": ")" + launcher + "\"" + (sections.empty() ? "" : ", ") +
         sections + R"(,
  "hosts": [{"host": "login1", "gpus": 8}]})";
}

TEST(HostsLauncher, SlurmSectionIsReadAndRoundTrips) {
  auto h = parseHosts(withLauncher("slurm", R"("slurm": {"submit": "sbatch", "partition": "gpu", "account": "proj42",
      "time": "1-12:00:00", "qos": "high", "nodes": 4, "gpus_per_task": 1, "gres": "gpu:8",
      "extra_args": ["--exclusive", "--constraint=a100&ib"]},
    "server_alive_interval_s": 2, "server_alive_count_max": 4)"));
  ASSERT_THAT(h, HasValue());
  EXPECT_EQ(h->launcher, Launcher::Slurm);
  EXPECT_EQ(h->slurm.submit, "sbatch");
  EXPECT_EQ(h->slurm.partition, "gpu");
  EXPECT_EQ(h->slurm.account, "proj42");
  EXPECT_EQ(h->slurm.time, "1-12:00:00");
  EXPECT_EQ(h->slurm.qos, "high");
  EXPECT_EQ(h->slurm.nodes, 4);
  EXPECT_EQ(h->slurm.gres, "gpu:8");
  EXPECT_EQ(h->slurm.extraArgs, (std::vector<std::string>{"--exclusive", "--constraint=a100&ib"}));
  EXPECT_EQ(h->serverAliveIntervalS, 2);
  EXPECT_EQ(h->serverAliveCountMax, 4);
  auto again = parseHosts(hostsToJson(*h).dump());
  ASSERT_THAT(again, HasValue());
  EXPECT_EQ(hostsToJson(*again), hostsToJson(*h));
}

TEST(HostsLauncher, DefaultsWithoutTheSections) {
  auto h = parseHosts(withLauncher("slurm", ""));
  ASSERT_THAT(h, HasValue());
  EXPECT_EQ(h->slurm.submit, "srun");
  EXPECT_EQ(h->slurm.gpusPerTask, 1);
  EXPECT_EQ(h->serverAliveIntervalS, 5);
  EXPECT_EQ(h->serverAliveCountMax, 3);
  auto m = parseHosts(withLauncher("mpirun", R"("mpirun": {"extra_args": ["--mca", "btl", "^openib"]})"));
  ASSERT_THAT(m, HasValue());
  EXPECT_EQ(m->mpirun.extraArgs.size(), 3U);
}

struct BadCase {
  const char* name;
  std::string text;
  const char* pointer;
  const char* what;
};

TEST(HostsLauncher, MistakesAreNamedWithTheirPointer) {
  const std::vector<BadCase> cases = {
      {"slurm section with ssh", withLauncher("ssh", R"("slurm": {})"), "/slurm", "the launcher is 'ssh'"},
      {"mpirun section with slurm", withLauncher("slurm", R"("mpirun": {})"), "/mpirun", R"("launcher": "mpirun")"},
      {"submit", withLauncher("slurm", R"("slurm": {"submit": "qsub"})"), "/slurm/submit", "expected srun or sbatch"},
      {"time", withLauncher("slurm", R"("slurm": {"time": "1h"})"), "/slurm/time", "not a Slurm time"},
      {"time too many fields", withLauncher("slurm", R"("slurm": {"time": "1:2:3:4"})"), "/slurm/time", "HH:MM:SS"},
      {"partition with a space", withLauncher("slurm", R"("slurm": {"partition": "gpu debug"})"), "/slurm/partition",
       "one word"},
      {"account that is an option", withLauncher("slurm", R"("slurm": {"account": "--uid=0"})"), "/slurm/account",
       "not an option"},
      {"nodes", withLauncher("slurm", R"("slurm": {"nodes": 0})"), "/slurm/nodes",
       "expected an integer in [1, 100000]"},
      {"unknown field", withLauncher("slurm", R"("slurm": {"partitions": "gpu"})"), "/slurm/partitions",
       "unknown field"},
      {"reserved srun option", withLauncher("slurm", R"("slurm": {"extra_args": ["--exclusive", "--output=x.log"]})"),
       "/slurm/extra_args/1", "--output is set by PipeStudio"},
      {"reserved short option", withLauncher("slurm", R"("slurm": {"extra_args": ["-n4"]})"), "/slurm/extra_args/0",
       "-n is set by PipeStudio"},
      {"line break in an argument", withLauncher("slurm", R"("slurm": {"extra_args": ["--comment=a\nb"]})"),
       "/slurm/extra_args/0", "line break"},
      {"extra_args not strings", withLauncher("slurm", R"("slurm": {"extra_args": [3]})"), "/slurm/extra_args/0",
       "expected a string"},
      {"reserved mpirun option", withLauncher("mpirun", R"("mpirun": {"extra_args": ["-np", "8"]})"),
       "/mpirun/extra_args/0", "-np is set by PipeStudio"},
      {"mpirun tag option", withLauncher("mpirun", R"("mpirun": {"extra_args": ["--output-filename=/tmp/x"]})"),
       "/mpirun/extra_args/0", "--output-filename is set by PipeStudio"},
      {"keepalive zero", withLauncher("ssh", R"("server_alive_interval_s": 0)"), "/server_alive_interval_s",
       "expected an integer in [1, 3600]"},
      {"keepalive count", withLauncher("ssh", R"("server_alive_count_max": 1000)"), "/server_alive_count_max",
       "expected an integer in [1, 100]"},
  };
  for (const auto& c : cases) {
    auto h = parseHosts(c.text);
    ASSERT_FALSE(h) << c.name;
    const std::string& m = h.message();
    EXPECT_TRUE(std::regex_search(m, std::regex("^hosts\\.json:[0-9]+:[0-9]+: "))) << c.name << ": " << m;
    EXPECT_NE(m.find(std::string(" ") + c.pointer + ": "), std::string::npos) << c.name << ": " << m;
    EXPECT_NE(m.find(c.what), std::string::npos) << c.name << ": " << m;
    EXPECT_NE(m.find("expected"), std::string::npos) << c.name << ": " << m;
  }
}

TEST(HostsLauncher, SlurmTimesAsSbatchTakesThem) {
  for (const char* t : {"30", "30:00", "01:30:00", "2-0", "2-12", "2-12:30", "2-12:30:00", "UNLIMITED", "infinite"}) {
    auto h = parseHosts(withLauncher("slurm", std::string(R"("slurm": {"time": ")") + t + "\"}"));
    EXPECT_THAT(h, HasValue()) << t;
  }
  for (const char* t : {"", "1h", "-5", "1:", ":30", "1-", "a-1", "1:2:3:4", "99999999999"}) {
    auto h = parseHosts(withLauncher("slurm", std::string(R"("slurm": {"time": ")") + t + "\"}"));
    EXPECT_FALSE(h) << t;
  }
}

// Every backend and launcher name parses back to itself; anything else (other case, spaces,
// a neighbour's word) is refused, so the CLI, GUI, executor and loader accept the same words.
TEST(LaunchNames, RoundTripAndRefuseEverythingElse) {
  for (Backend b : kBackends) EXPECT_EQ(parseBackend(name(b)), b);
  for (Launcher l : kLaunchers) EXPECT_EQ(parseLauncher(name(l)), l);
  EXPECT_EQ(backendChoices(), "cuda, cuda-single or cpu");
  EXPECT_EQ(launcherChoices(), "ssh, slurm or mpirun");
  for (const char* bad : {"", "CPU", "cuda ", "gpu", "ssh", "cuda_single"}) EXPECT_FALSE(parseBackend(bad)) << bad;
  for (const char* bad : {"", "SSH", "srun", "cpu", " slurm"}) EXPECT_FALSE(parseLauncher(bad)) << bad;
  for (Launcher l : kLaunchers) {
    auto h = parseHosts(withLauncher(std::string(name(l)), ""));
    ASSERT_THAT(h, HasValue());
    EXPECT_EQ(h->launcher, l);
  }
}

}  // namespace
}  // namespace pipestudio
