#include "pipestudio/executor/Executor.hpp"

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "Backend.hpp"
#include "pipestudio/common/NumberArg.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/executor/Launcher.hpp"
#include "pipestudio/plan/PlanIO.hpp"

namespace pipestudio::exec {
namespace {

// The shared command-line number rules (core/common NumberArg.hpp), as pipestudio-cli uses.
Expected<std::int64_t> parseInt(const std::string& what, const std::string& text, std::int64_t lo, std::int64_t hi) {
  return parseIntegerArg(what, text, lo, hi);
}

Expected<double> parseDouble(const std::string& what, const std::string& text, double lo, double hi) {
  return parseNumberArg(what, text, lo, hi);
}

const char* envOf(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// How long the lanes of a failed run get to leave their ops before the process leaves them.
constexpr double kStuckLaneGraceS = 2.0;

// Counts lane threads that have returned, so the main thread can wait for them with a limit.
class LanesDone {
 public:
  void finish() {
    {
      std::lock_guard lock(m_mutex);
      ++m_done;
    }
    m_changed.notify_all();
  }
  /// True once `lanes` threads returned; false when the run failed and they did not within
  /// `graceS` of the failure being seen.
  bool waitAll(std::size_t lanes, const RunControl& control, double graceS) {
    std::unique_lock lock(m_mutex);
    std::optional<std::chrono::steady_clock::time_point> giveUpAt;
    while (m_done < lanes) {
      m_changed.wait_for(lock, std::chrono::milliseconds(50));
      if (!control.aborted()) continue;
      const auto now = std::chrono::steady_clock::now();
      if (!giveUpAt)
        giveUpAt = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(graceS));
      if (now >= *giveUpAt && m_done < lanes) return false;
    }
    return true;
  }

 private:
  std::mutex m_mutex;
  std::condition_variable m_changed;
  std::size_t m_done = 0;
};

}  // namespace

Expected<FaultSpec> parseFault(const std::string& text) {
  FaultSpec f;
  if (text.empty()) return f;
  std::vector<std::string> parts;
  std::stringstream ss(text);
  for (std::string part; std::getline(ss, part, ':');) parts.push_back(part);
  const std::string where = "PIPESTUDIO_EXEC_FAULT='" + text + "'";
  if (parts.empty()) return Error{where + ": empty"};
  if (parts[0] == "crash")
    f.mode = FaultSpec::Mode::Crash;
  else if (parts[0] == "die")
    f.mode = FaultSpec::Mode::Die;
  else if (parts[0] == "hang")
    f.mode = FaultSpec::Mode::Hang;
  else if (parts[0] == "error")
    f.mode = FaultSpec::Mode::Error;
  else
    return Error{where + ": unknown mode '" + parts[0] + "' (expected crash, die, hang or error)"};
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const auto eq = parts[i].find('=');
    const std::string key = parts[i].substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : parts[i].substr(eq + 1);
    if (key == "rank") {
      PS_ASSIGN_OR_RETURN(auto v, parseInt(where + " rank", value, 0, 1 << 20));
      f.rank = static_cast<int>(v);
    } else if (key == "after_ops") {
      PS_ASSIGN_OR_RETURN(auto v, parseInt(where + " after_ops", value, 1, std::int64_t{1} << 40));
      f.afterOps = v;
    } else {
      std::string message = where;
      message += ": unknown field '" + key + "' (expected rank=R and after_ops=N)";
      return Error{message};
    }
  }
  if (f.afterOps == 0) f.afterOps = 1;
  return f;
}

std::string execUsage() {
  return "usage: pipestudio-exec --plan PLAN.json [--backend cpu|cuda|cuda-single] [--iterations N] [--warmup K]\n"
         "         [--rank R --world W] [--nccl-id HEX] [--run-id ID] [--time-scale F | --max-op-ms MS]\n"
         "         [--timeout-s S] [--profile MODEL_OUT.json] [--baseline] [--cpu-memory-budget BYTES]\n"
         "         [--device-memory BYTES]\n"
         "Runs a pipestudio.plan/1 and writes the binary trace stream (docs/formats.md) on stdout; logs on stderr.\n"
         "Rank/world also come from OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE or SLURM_PROCID/NTASKS;\n"
         "NCCL_COMM_ID lets every rank derive the NCCL id itself. Exit: 0 ok, 1 refused plan or failed run, 2 usage.\n"
         "Under srun or mpirun: pipestudio-exec --task slurm|mpirun [--nccl-rendezvous FILE] -- OPTIONS "
         "(Launcher.hpp).\n";
}

Expected<ExecOptions> parseExecArgs(const std::vector<std::string>& args) {
  ExecOptions o;
  bool rankGiven = false, worldGiven = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> Expected<std::string> {
      if (i + 1 >= args.size()) return Error{a + ": missing value"};
      return args[++i];
    };
    if (a == "--help" || a == "-h") return Error{"usage"};
    if (a == "--baseline") {
      o.baseline = true;
      continue;
    }
    PS_ASSIGN_OR_RETURN(auto v, value());
    if (a == "--plan") {
      o.planPath = v;
    } else if (a == "--backend") {
      auto backend = parseBackend(v);
      if (!backend) return Error{"--backend: '" + v + "' (expected " + backendChoices() + ")"};
      o.backend = *backend;
    } else if (a == "--iterations" || a == "--warmup" || a == "--rank" || a == "--world") {
      PS_ASSIGN_OR_RETURN(auto n, parseInt(a, v, a == "--iterations" || a == "--world" ? 1 : 0, 1 << 20));
      if (a == "--iterations") o.iterations = static_cast<int>(n);
      if (a == "--warmup") o.warmup = static_cast<int>(n);
      if (a == "--rank") o.rank = static_cast<int>(n), rankGiven = true;
      if (a == "--world") o.world = static_cast<int>(n), worldGiven = true;
    } else if (a == "--nccl-id") {
      o.ncclIdHex = v;
    } else if (a == "--run-id") {
      o.runId = v;
    } else if (a == "--time-scale" || a == "--max-op-ms" || a == "--timeout-s") {
      PS_ASSIGN_OR_RETURN(auto d, parseDouble(a, v, 1e-6, 1e6));
      if (a == "--time-scale") o.timeScale = d;
      if (a == "--max-op-ms") o.maxOpMs = d;
      if (a == "--timeout-s") o.watchdogTimeoutS = d;
    } else if (a == "--profile") {
      o.profileOut = v;
    } else if (a == "--cpu-memory-budget" || a == "--device-memory") {
      auto b = parseBytes(v);
      if (!b || *b <= 0) {
        std::string why = a;
        why.append(": '").append(v).append("' (expected a size such as 64MiB)");
        return Error{why};
      }
      if (a == "--cpu-memory-budget")
        o.cpuMemoryBudgetBytes = *b;
      else
        o.deviceMemoryBytes = *b;
    } else {
      return Error{"unknown option '" + a + "'"};
    }
  }
  if (o.planPath.empty()) return Error{"--plan is required"};
  // Launchers with their own bootstrap (mpirun, srun) give rank and world in the environment.
  const std::array<std::pair<const char*, const char*>, 3> launchers{
      {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, {"PMI_RANK", "PMI_SIZE"}, {"SLURM_PROCID", "SLURM_NTASKS"}}};
  for (const auto& [rankVar, sizeVar] : launchers) {
    const char* r = envOf(rankVar);
    const char* s = envOf(sizeVar);
    if (r == nullptr || s == nullptr) continue;
    if (!rankGiven) {
      PS_ASSIGN_OR_RETURN(auto n, parseInt(rankVar, r, 0, 1 << 20));
      o.rank = static_cast<int>(n);
    }
    if (!worldGiven) {
      PS_ASSIGN_OR_RETURN(auto n, parseInt(sizeVar, s, 1, 1 << 20));
      o.world = static_cast<int>(n);
    }
    break;
  }
  if (o.rank >= o.world) {
    return Error{"--rank " + std::to_string(o.rank) + " is not below --world " + std::to_string(o.world)};
  }
  if (const char* fault = envOf("PIPESTUDIO_EXEC_FAULT")) {
    PS_ASSIGN_OR_RETURN(auto f, parseFault(fault));
    o.fault = f;
  }
  return o;
}

namespace {

// Says why this rank failed, on stderr, and gives the exit code.
int failRank(const ExecOptions& options, const std::string& message) {
  std::cerr << "pipestudio-exec: rank " << options.rank << ": " << message << '\n';
  return 1;
}

// Tells the reader of the trace that the run failed: the failure, then the summary.
void writeFailure(FrameSink& sink, int rank, const std::string& why, const trace::Summary& summary) {
  sink.write(trace::ErrorReport{rank, why});
  sink.write(summary);
}

// --max-op-ms: the scale that makes the plan's longest op last that long; else --time-scale.
double runTimeScale(const ExecOptions& options, const Plan& plan) {
  double timeScale = options.timeScale;
  if (options.maxOpMs) {
    double longest = 0;
    for (const Op& op : plan.ops) longest = std::max(longest, op.durationMs());
    if (longest > 0) timeScale = *options.maxOpMs / longest;
  }
  return timeScale;
}

// The first frame of this process's trace: who runs, where, on what, and its clocks.
trace::Header traceHeader(const ExecOptions& options, const Clock& clock, const Backend& be) {
  std::array<char, 256> host{};
  ::gethostname(host.data(), host.size() - 1);
  trace::Header header;
  header.runId = options.runId;
  header.rank = options.backend == pipestudio::Backend::Cuda ? options.rank : 0;
  header.world = options.backend == pipestudio::Backend::Cuda ? options.world : 1;
  header.host = host.data();
  header.backend = std::string(name(options.backend));
  header.deviceName = be.deviceName();
  header.clockOriginNs = clock.originNs();
  header.wallClockNs = clock.wallNs();
  return header;
}

using IterationSpans = std::vector<std::pair<std::int64_t, std::int64_t>>;  // per iteration: [start, end] ns

// Starts a thread per lane that walks its device program into spans[i]; `done` counts the
// threads that returned.
std::vector<std::thread> startLanes(const Program& program, const std::vector<Lane*>& lanes, RunControl& control,
                                    const WalkOptions& walk, std::vector<IterationSpans>& spans, LanesDone& done) {
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    threads.emplace_back([&program, &lanes, &control, &walk, &spans, &done, i] {
      Lane& lane = *lanes[i];
      auto r = walkDevice(program.perDevice[lane.device()], lane, control, walk);
      if (r) {
        spans[i] = std::move(*r);
      } else {
        // "dead" is the silent-death fault: the others must find out through the watchdog.
        if (r.message() != "dead" && r.message() != "aborted") control.fail(lane.device(), r.message());
        if (r.message() == "aborted" && !control.aborted()) control.fail(lane.device(), "aborted");
      }
      done.finish();
    });
  }
  return threads;
}

// Each iteration's step time over this process's lanes: its first start to its last end.
std::vector<double> iterationTimesMs(const std::vector<IterationSpans>& spans, int iterations) {
  std::vector<double> out;
  for (int it = 0; it < iterations; ++it) {
    std::int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (const auto& s : spans) {
      if (static_cast<std::size_t>(it) >= s.size()) continue;
      lo = std::min(lo, s[static_cast<std::size_t>(it)].first);
      hi = std::max(hi, s[static_cast<std::size_t>(it)].second);
    }
    if (hi >= lo) out.push_back(static_cast<double>(hi - lo) / 1e6);
  }
  return out;
}

// The run itself: the backend's lanes walk the program while heartbeat and watchdog watch,
// and the trace gets its header, the lanes' records and the summary.
int runPipeline(const Plan& plan, const Program& program, const ExecOptions& options, double timeScale, int outFd) {
  Clock clock;
  FrameSink sink(outFd);
  RunControl control(program.devices);
  // Nobody receives the trace any more (reader gone, disk full): stop the run, it failed.
  sink.setOnBroken([&control, rank = options.rank](const std::string& why) { control.fail(rank, why); });
  BackendContext ctx{plan, program, options, clock, sink, control, timeScale};
  auto backend = options.backend == pipestudio::Backend::Cpu
                     ? makeCpuBackend(ctx)
                     : makeCudaBackend(ctx, options.backend == pipestudio::Backend::CudaSingle);
  if (!backend) return failRank(options, "plan refused: " + backend.message());
  Backend& be = **backend;

  const trace::Header header = traceHeader(options, clock, be);
  sink.start();
  sink.write(header);
  // Beats while the run goes on (NCCL set-up, silent warm-up and long iterations included).
  Heartbeat heartbeat(sink, control, std::clamp(options.watchdogTimeoutS / 4, 0.05, 1.0));
  if (auto st = be.afterHeader(); !st) {
    heartbeat.stop();
    trace::Summary failed;
    failed.ok = false;
    writeFailure(sink, header.rank, st.message(), failed);
    return failRank(options, st.message());
  }

  std::vector<Lane*> lanes = be.lanes();
  std::vector<int> local;
  local.reserve(lanes.size());
  for (Lane* l : lanes) local.push_back(l->device());
  WalkOptions walk{options.iterations, options.warmup, options.fault, -1};
  if (options.fault.mode != FaultSpec::Mode::None) walk.faultTarget = options.fault.rank;
  Watchdog watchdog(control, options.watchdogTimeoutS, local, [&be] { be.abortTransport(); });

  std::vector<IterationSpans> spans(lanes.size());
  LanesDone done;
  const std::int64_t startNs = clock.nowNs();
  std::vector<std::thread> threads = startLanes(program, lanes, control, walk, spans, done);
  // A failed run whose lanes stay inside an op (a 10¹² ms op, a hung kernel) ends anyway: its
  // failure is reported and the process leaves without waiting for them.
  if (!done.waitAll(threads.size(), control, kStuckLaneGraceS)) {
    heartbeat.stop();
    const int rank = control.failedRank();
    const std::string why = control.failure();
    trace::Summary failed;
    failed.ok = false;
    failed.elapsedNs = clock.nowNs() - startNs;
    writeFailure(sink, rank, why, failed);
    const int code = failRank(options, "run failed: rank " + std::to_string(rank) + " failed: " + why +
                                           " (a device is still inside an op; leaving without it)");
    std::cerr.flush();
    std::_Exit(code);
  }
  for (auto& t : threads) t.join();
  watchdog.stop();
  heartbeat.stop();
  const std::uint64_t dropped = be.finish();

  trace::Summary summary;
  summary.droppedRecords = dropped;
  summary.elapsedNs = clock.nowNs() - startNs;
  summary.ok = !control.aborted();
  if (!summary.ok) {
    const int rank = control.failedRank();
    const std::string why = control.failure();
    writeFailure(sink, rank, why, summary);
    const int code = failRank(options, "run failed: rank " + std::to_string(rank) + " failed: " + why);
    // A GPU whose communicator was aborted may never finish its streams: leave without the
    // CUDA runtime's teardown, which would wait for them.
    if (options.backend != pipestudio::Backend::Cpu) std::_Exit(code);
    return code;
  }
  summary.iterations = options.iterations;
  summary.iterationMs = iterationTimesMs(spans, options.iterations);
  sink.write(summary);
  if (sink.broken()) return failRank(options, "run failed: " + sink.brokenReason());
  double total = 0;
  for (double ms : summary.iterationMs) total += ms;
  std::cerr << "pipestudio-exec: " << options.iterations << " iteration(s), mean step "
            << (summary.iterationMs.empty() ? 0.0 : total / static_cast<double>(summary.iterationMs.size())) << " ms\n";
  return 0;
}

}  // namespace

int runExecutor(const ExecOptions& options, int outFd) {
  auto plan = loadPlan(options.planPath);
  if (!plan) return failRank(options, "plan refused: " + plan.message());
  auto program = compileProgram(*plan);
  if (!program) return failRank(options, "plan refused: " + options.planPath + ": " + program.message());
  if (options.backend == pipestudio::Backend::Cuda && options.world != program->devices) {
    return failRank(options, "plan refused: the plan has " + std::to_string(program->devices) +
                                 " devices but --world is " + std::to_string(options.world) +
                                 " (cuda runs one process per device)");
  }
  const double timeScale = runTimeScale(options, *plan);
  if ((options.profileOut || options.baseline) && options.backend == pipestudio::Backend::Cpu) {
    return failRank(options, "--profile and --baseline measure GPU kernels: use --backend cuda-single or cuda");
  }
  if (options.profileOut) {
    if (auto st = profileModel(*plan, options); !st) return failRank(options, "profile failed: " + st.message());
    return 0;
  }
  if (options.baseline) {
    auto ms = runBaseline(*plan, options, timeScale);
    if (!ms) return failRank(options, "baseline failed: " + ms.message());
    std::cout << "{\"baseline_ms\": " << *ms << "}\n";
    return 0;
  }
  return runPipeline(*plan, *program, options, timeScale, outFd);
}

int execMain(int argc, char** argv) {
  // Started by a local launcher (pipestudio-cli run): die with it, even after a kill -9.
  if (const char* parent = envOf(kParentPidEnv)) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The launcher may have died between spawning us and the prctl: then nobody reads us.
    if (std::to_string(::getppid()) != parent) {
      std::cerr << "pipestudio-exec: the launcher (pid " << parent << ") is gone; not starting\n";
      return 1;
    }
  }
  // A reader that goes away must not kill the rank before it has stopped its peers.
  std::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv + 1, argv + argc);
  auto options = parseExecArgs(args);
  if (!options) {
    if (options.message() == "usage") {
      std::cout << execUsage();
      return 0;
    }
    std::cerr << "pipestudio-exec: " << options.message() << '\n' << execUsage();
    return 2;
  }
  return runExecutor(*options, STDOUT_FILENO);
}

}  // namespace pipestudio::exec
