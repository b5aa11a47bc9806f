#include "HostsIO.hpp"

#include <cctype>

namespace pipestudio {
namespace {

constexpr std::size_t kMaxExtraArgs = 64;
constexpr std::size_t kMaxWordBytes = 256;

// Options the deployer sets itself, or that would break the live streams (FORMAT.md,
// "Launcher lines"): output redirection, labels, a pseudo-terminal, the task count.
const std::vector<std::string_view> kReservedSlurm = {
    "--ntasks", "-n",      "--job-name", "-J",    "--output",     "-o",         "--error", "-e", "--input",
    "-i",       "--label", "-l",         "--pty", "--unbuffered", "-u",         "--chdir", "-D", "--kill-on-bad-exit",
    "-K",       "--wrap",  "--wait",     "-W",    "--parsable",   "--open-mode"};
const std::vector<std::string_view> kReservedMpirun = {"-np",
                                                       "--np",
                                                       "-n",
                                                       "-c",
                                                       "--host",
                                                       "-host",
                                                       "-H",
                                                       "--hostfile",
                                                       "-hostfile",
                                                       "--machinefile",
                                                       "-machinefile",
                                                       "--tag-output",
                                                       "-tag-output",
                                                       "--output-filename",
                                                       "-output-filename",
                                                       "--timestamp-output",
                                                       "-timestamp-output",
                                                       "--xml",
                                                       "-xml",
                                                       "--output"};

// The reserved option `arg` spells ("--ntasks=4", "--ntasks", "-n4"), or empty.
std::string_view reservedSpelling(std::string_view arg, const std::vector<std::string_view>& reserved) {
  for (const std::string_view r : reserved) {
    if (arg == r) return r;
    const bool longOption = r.size() > 2;
    if (longOption && arg.size() > r.size() && arg.substr(0, r.size()) == r && arg[r.size()] == '=') return r;
    // A short option with its value attached ("-n4"), but not a long option that happens to
    // start with the same letter ("-np" is not "-n" followed by "p" for mpirun's own -n).
    if (!longOption && arg.size() > 2 && arg.substr(0, 2) == r && arg[1] != '-' &&
        std::isdigit(static_cast<unsigned char>(arg[2])) != 0) {
      return r;
    }
  }
  return {};
}

// A Slurm name (partition, account, QoS, gres): one word a shell would not split.
std::optional<std::string> readWord(JsonReader& r, const JsonNode& obj, std::string_view key) {
  auto value = r.string(obj, key, Presence::Optional);
  if (!value) return std::nullopt;
  const JsonNode node = obj.child(key);
  if (value->size() > kMaxWordBytes) {
    r.error(node, "is " + std::to_string(value->size()) + " bytes long (expected at most " +
                      std::to_string(kMaxWordBytes) + ")");
    return std::nullopt;
  }
  for (const char c : *value) {
    if (std::isspace(static_cast<unsigned char>(c)) != 0 || std::iscntrl(static_cast<unsigned char>(c)) != 0) {
      r.error(node, "'" + *value + "' contains white space or a control character (expected one word)");
      return std::nullopt;
    }
  }
  if ((*value)[0] == '-') {
    r.error(node, "'" + *value + "' starts with '-' (expected a name, not an option)");
    return std::nullopt;
  }
  return value;
}

bool allDigits(std::string_view s) {
  if (s.empty() || s.size() > 9) return false;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// Slurm's time formats (sbatch(1) --time): M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or
// UNLIMITED / INFINITE.
bool validSlurmTime(std::string_view t) {
  if (t == "UNLIMITED" || t == "INFINITE" || t == "unlimited" || t == "infinite") return true;
  if (const auto dash = t.find('-'); dash != std::string_view::npos) {
    if (!allDigits(t.substr(0, dash))) return false;
    t.remove_prefix(dash + 1);
  }
  int parts = 0;
  while (true) {
    const auto colon = t.find(':');
    if (!allDigits(t.substr(0, colon))) return false;
    ++parts;
    if (colon == std::string_view::npos) break;
    t.remove_prefix(colon + 1);
  }
  return parts <= 3;
}

std::vector<std::string> readExtraArgs(JsonReader& r, const JsonNode& obj,
                                       const std::vector<std::string_view>& reserved, const std::string& launcher) {
  std::vector<std::string> out;
  auto args = r.array(obj, "extra_args", Presence::Optional);
  if (!args) return out;
  if (args->value->size() > kMaxExtraArgs) {
    r.error(*args, "has " + std::to_string(args->value->size()) + " entries (expected at most " +
                       std::to_string(kMaxExtraArgs) + ")");
    return out;
  }
  for (std::size_t i = 0; i < args->value->size(); ++i) {
    const JsonNode n = args->child(i);
    auto arg = r.stringValue(n);
    if (!arg) continue;
    bool bad = false;
    for (const char c : *arg) bad = bad || c == '\0' || c == '\n' || c == '\r';
    if (bad) {
      r.error(n, "contains a NUL or line break (expected one command-line word)");
      continue;
    }
    if (const auto spelling = reservedSpelling(*arg, reserved); !spelling.empty()) {
      r.error(n, "'" + *arg + "': " + std::string(spelling) + " is set by PipeStudio (the " + launcher +
                     " line needs it for the live streams and the job's state; expected other options)");
      continue;
    }
    out.push_back(std::move(*arg));
  }
  return out;
}

void readSlurm(JsonReader& r, const JsonNode& node, SlurmOptions& s) {
  if (!r.isObject(node)) return;
  r.rejectUnknown(node,
                  {"submit", "partition", "account", "time", "qos", "nodes", "gpus_per_task", "gres", "extra_args"});
  if (auto submit = r.string(node, "submit", Presence::Optional)) {
    if (*submit != "srun" && *submit != "sbatch") {
      r.error(node.child("submit"), "'" + *submit + "' (expected srun or sbatch)");
    } else {
      s.submit = *submit;
    }
  }
  s.partition = readWord(r, node, "partition").value_or("");
  s.account = readWord(r, node, "account").value_or("");
  s.qos = readWord(r, node, "qos").value_or("");
  s.gres = readWord(r, node, "gres").value_or("");
  if (auto time = r.string(node, "time", Presence::Optional)) {
    if (!validSlurmTime(*time)) {
      r.error(node.child("time"), "'" + *time +
                                      "' is not a Slurm time (expected minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
                                      "D-HH:MM:SS, as in sbatch --time)");
    } else {
      s.time = *time;
    }
  }
  s.nodes = static_cast<int>(r.integer(node, "nodes", Presence::Optional, 1, 100000).value_or(0));
  s.gpusPerTask = static_cast<int>(r.integer(node, "gpus_per_task", Presence::Optional, 0, 64).value_or(1));
  s.extraArgs = readExtraArgs(r, node, kReservedSlurm, s.submit == "sbatch" ? "sbatch" : "srun");
}

}  // namespace

void readLauncherSections(JsonReader& r, const JsonNode& at, HostsSpec& h) {
  if (at.value->contains("slurm")) {
    const JsonNode node = at.child("slurm");
    if (h.launcher != Launcher::Slurm) {
      r.error(node, "is given but the launcher is '" + std::string(name(h.launcher)) +
                        "' (expected \"launcher\": \"slurm\")");
    }
    readSlurm(r, node, h.slurm);
  }
  if (at.value->contains("mpirun")) {
    const JsonNode node = at.child("mpirun");
    if (h.launcher != Launcher::Mpirun) {
      r.error(node, "is given but the launcher is '" + std::string(name(h.launcher)) +
                        "' (expected \"launcher\": \"mpirun\")");
    }
    if (r.isObject(node)) {
      r.rejectUnknown(node, {"extra_args"});
      h.mpirun.extraArgs = readExtraArgs(r, node, kReservedMpirun, "mpirun");
    }
  }
  h.serverAliveIntervalS =
      static_cast<int>(r.integer(at, "server_alive_interval_s", Presence::Optional, 1, 3600).value_or(5));
  h.serverAliveCountMax =
      static_cast<int>(r.integer(at, "server_alive_count_max", Presence::Optional, 1, 100).value_or(3));
}

void writeLauncherSections(const HostsSpec& h, Json& j) {
  const HostsSpec defaults;
  if (h.launcher == Launcher::Slurm) {
    const SlurmOptions& s = h.slurm;
    Json sj = Json::object();
    sj["submit"] = s.submit;
    if (!s.partition.empty()) sj["partition"] = s.partition;
    if (!s.account.empty()) sj["account"] = s.account;
    if (!s.time.empty()) sj["time"] = s.time;
    if (!s.qos.empty()) sj["qos"] = s.qos;
    if (s.nodes > 0) sj["nodes"] = s.nodes;
    sj["gpus_per_task"] = s.gpusPerTask;
    if (!s.gres.empty()) sj["gres"] = s.gres;
    if (!s.extraArgs.empty()) sj["extra_args"] = s.extraArgs;
    j["slurm"] = std::move(sj);
  }
  if (h.launcher == Launcher::Mpirun && !h.mpirun.extraArgs.empty())
    j["mpirun"] = Json{{"extra_args", h.mpirun.extraArgs}};
  if (h.serverAliveIntervalS != defaults.serverAliveIntervalS) j["server_alive_interval_s"] = h.serverAliveIntervalS;
  if (h.serverAliveCountMax != defaults.serverAliveCountMax) j["server_alive_count_max"] = h.serverAliveCountMax;
}

}  // namespace pipestudio
