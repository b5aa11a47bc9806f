#include "pipestudio/executor/Launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "pipestudio/common/Try.hpp"
#include "pipestudio/trace/TaskLines.hpp"

extern char** environ;

namespace pipestudio::exec {
namespace {

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int out = -1;
  int err = -1;
  bool exited = false;
  int status = 0;
  trace::StreamDecoder decoder;
  std::string errLine;
  RankOutcome outcome;
  std::chrono::steady_clock::time_point heardAt;  ///< spawn, then the last bytes on its stream
};

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

Status spawnRank(Child& c, const std::vector<std::string>& args) {
  std::array<int, 2> outPipe{};
  std::array<int, 2> errPipe{};
  if (::pipe2(outPipe.data(), O_CLOEXEC) != 0 || ::pipe2(errPipe.data(), O_CLOEXEC) != 0) {
    return Error{std::string("pipe: ") + std::strerror(errno)};
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, outPipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, errPipe[1], STDERR_FILENO);
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // Our environment plus our pid, which the rank watches (kParentPidEnv).
  const std::string parentVar = std::string(kParentPidEnv) + "=" + std::to_string(::getpid());
  const std::string_view parentPrefix = std::string_view(parentVar).substr(0, std::strlen(kParentPidEnv) + 1);
  std::vector<char*> envp;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::string_view(*e).rfind(parentPrefix, 0) != 0) envp.push_back(*e);
  }
  envp.push_back(const_cast<char*>(parentVar.c_str()));
  envp.push_back(nullptr);
  const int rc = ::posix_spawn(&c.pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(outPipe[1]);
  ::close(errPipe[1]);
  if (rc != 0) {
    ::close(outPipe[0]);
    ::close(errPipe[0]);
    return Error{"cannot start " + args[0] + ": " + std::strerror(rc)};
  }
  c.out = outPipe[0];
  c.err = errPipe[0];
  c.heardAt = std::chrono::steady_clock::now();
  return {};
}

// One local launch: its ranks as child processes, read until all ended. The phases of
// launchLocal: start, serve (one pass per poll), finish.
class LocalLaunch {
 public:
  LocalLaunch(const LaunchRequest& request, const FrameCallback& onFrame, const BytesCallback& onBytes)
      : m_request(request),
        m_onFrame(onFrame),
        m_onBytes(onBytes),
        m_children(static_cast<std::size_t>(std::max(1, request.world))),
        m_needId(request.backend == pipestudio::Backend::Cuda && m_children.size() > 1),
        m_othersStarted(!m_needId),
        m_silenceLimit(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(request.silenceTimeoutS))) {
    for (std::size_t r = 0; r < m_children.size(); ++r) {
      m_children[r].rank = static_cast<int>(r);
      m_children[r].outcome.rank = static_cast<int>(r);
    }
  }

  Status start() {
    PS_RETURN_IF_ERROR(spawnRank(m_children[0], args(0, "")));
    // Ranks > 0 of the cuda backend need rank 0's NCCL id: they start when it arrives.
    if (!m_needId) {
      for (std::size_t r = 1; r < m_children.size(); ++r) {
        PS_RETURN_IF_ERROR(spawnRank(m_children[r], args(static_cast<int>(r), "")));
      }
    }
    return {};
  }

  // Polls the ranks' pipes until every rank ended and its pipes closed.
  void serve() {
    for (;;) {
      std::vector<pollfd> fds;
      std::vector<std::pair<Child*, bool>> owners;  // (child, is stdout)
      for (Child& c : m_children) {
        if (c.out >= 0) fds.push_back({c.out, POLLIN, 0}), owners.emplace_back(&c, true);
        if (c.err >= 0) fds.push_back({c.err, POLLIN, 0}), owners.emplace_back(&c, false);
      }
      bool running = false;
      for (Child& c : m_children) running = running || (c.pid > 0 && !c.exited);
      if (fds.empty() && !running && m_othersStarted) break;
      stopIfAsked();
      stopIfSilent();
      if (m_killAt && std::chrono::steady_clock::now() >= *m_killAt) {
        for (Child& c : m_children) {
          if (c.pid > 0 && !c.exited) ::kill(c.pid, SIGKILL);
        }
        m_killAt = std::chrono::steady_clock::now() + std::chrono::hours(24);
      }
      ::poll(fds.data(), fds.size(), 100);
      for (std::size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents != 0) readPipe(*owners[i].first, owners[i].second, fds[i].fd);
      }
      reap();
    }
  }

  LaunchOutcome finish() {
    for (Child& c : m_children) {
      if (!c.errLine.empty()) {
        std::cerr << "[rank " << c.rank << "] " << c.errLine << '\n';
        c.outcome.lastLog = c.errLine;
      }
      c.outcome.truncatedBytes = c.decoder.pendingBytes();
      c.outcome.streamError = c.decoder.error();
      if (c.outcome.streamError) noteFailure("rank " + std::to_string(c.rank) + ": " + *c.outcome.streamError);
      m_outcome.ranks.push_back(c.outcome);
    }
    m_outcome.ok = m_firstFailure.empty();
    m_outcome.failure = m_firstFailure;
    return m_outcome;
  }

 private:
  std::vector<std::string> args(int rank, const std::string& ncclId) const {
    std::vector<std::string> a{m_request.executable,
                               "--plan",
                               m_request.planPath,
                               "--backend",
                               std::string(name(m_request.backend)),
                               "--iterations",
                               std::to_string(m_request.iterations),
                               "--warmup",
                               std::to_string(m_request.warmup)};
    if (!m_request.runId.empty()) a.insert(a.end(), {"--run-id", m_request.runId});
    if (m_request.world > 1 || m_request.backend == pipestudio::Backend::Cuda) {
      a.insert(a.end(), {"--rank", std::to_string(rank), "--world", std::to_string(m_request.world)});
    }
    if (!ncclId.empty()) a.insert(a.end(), {"--nccl-id", ncclId});
    a.insert(a.end(), m_request.extraArgs.begin(), m_request.extraArgs.end());
    return a;
  }

  void noteFailure(const std::string& why) {
    if (m_firstFailure.empty()) m_firstFailure = why;
    if (!m_killAt) {
      m_killAt = std::chrono::steady_clock::now() +
                 std::chrono::milliseconds(static_cast<std::int64_t>(m_request.peerExitTimeoutS * 1000));
    }
  }

  // Ends every rank that still runs: SIGTERM (with SIGCONT, so a stopped one acts on it), then
  // SIGKILL once `m_killAt` passes.
  void endRanks() {
    for (Child& c : m_children) {
      if (c.pid > 0 && !c.exited) {
        ::kill(c.pid, SIGTERM);
        ::kill(c.pid, SIGCONT);
      }
    }
    m_othersStarted = true;  // ranks not started yet never will be
    m_killAt = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  }

  void stopIfAsked() {
    if (m_outcome.stopped || !m_request.stopRequested) return;
    if (auto why = m_request.stopRequested()) {
      // Stopped from outside (a signal, a full history disk): ask the ranks to end, then make
      // sure they have.
      m_outcome.stopped = true;
      m_firstFailure = *why;
      endRanks();
    }
  }

  // A rank silent past the limit (stopped, or hung where its own watchdog cannot end it) fails
  // the run: the launcher ends the ranks rather than wait for them forever.
  void stopIfSilent() {
    if (m_silenced || m_outcome.stopped || m_request.silenceTimeoutS <= 0) return;
    const auto now = std::chrono::steady_clock::now();
    for (Child& c : m_children) {
      if (c.pid <= 0 || c.exited || now - c.heardAt < m_silenceLimit) continue;
      m_silenced = true;
      const std::string why = "rank " + std::to_string(c.rank) + " sent nothing for " +
                              std::to_string(static_cast<long long>(std::ceil(m_request.silenceTimeoutS))) +
                              " s (stopped or hung past its watchdog; the ranks were ended)";
      if (m_firstFailure.empty()) m_firstFailure = why;
      endRanks();
      break;
    }
  }

  // What is readable on one of a rank's pipes: stream frames on stdout, log lines on stderr.
  void readPipe(Child& c, bool isOut, int fd) {
    const ssize_t n = ::read(fd, m_buffer.data(), m_buffer.size());
    if (n < 0 && errno == EINTR) return;
    if (n <= 0) {
      ::close(fd);
      (isOut ? c.out : c.err) = -1;
      return;
    }
    if (isOut) c.heardAt = std::chrono::steady_clock::now();
    if (!isOut) {
      for (ssize_t k = 0; k < n; ++k) {
        const char ch = m_buffer[static_cast<std::size_t>(k)];
        if (ch == '\n') {
          std::cerr << "[rank " << c.rank << "] " << c.errLine << '\n';
          c.outcome.lastLog = c.errLine;
          c.errLine.clear();
        } else if (c.errLine.size() < 4096) {
          c.errLine += ch;
        }
      }
      return;
    }
    const std::string_view bytes(m_buffer.data(), static_cast<std::size_t>(n));
    if (m_onBytes) m_onBytes(c.rank, bytes);
    c.decoder.feed(bytes);
    while (auto frame = c.decoder.next()) {
      ++c.outcome.frames;
      if (const auto* id = std::get_if<trace::NcclId>(&*frame); id != nullptr && !m_othersStarted) {
        for (std::size_t r = 1; r < m_children.size(); ++r) {
          if (auto st = spawnRank(m_children[r], args(static_cast<int>(r), hex(id->bytes))); !st) {
            noteFailure("rank " + std::to_string(r) + ": " + st.message());
          }
        }
        m_othersStarted = true;
      }
      if (const auto* e = std::get_if<trace::ErrorReport>(&*frame)) {
        noteFailure("rank " + std::to_string(e->rank) + " failed: " + e->message);
      }
      if (m_onFrame) m_onFrame(c.rank, *frame);
    }
  }

  // Ranks that exited since the last pass, with how.
  void reap() {
    for (Child& c : m_children) {
      if (c.pid <= 0 || c.exited) continue;
      int status = 0;
      if (::waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      c.exited = true;
      if (WIFSIGNALED(status)) {
        c.outcome.signal = WTERMSIG(status);
        noteFailure("rank " + std::to_string(c.rank) + " was killed by signal " + std::to_string(c.outcome.signal) +
                    " (" + strsignal(c.outcome.signal) + ")");
      } else {
        c.outcome.exitStatus = WEXITSTATUS(status);
        if (c.outcome.exitStatus != 0) {
          noteFailure("rank " + std::to_string(c.rank) + " exited with status " + std::to_string(c.outcome.exitStatus) +
                      (c.outcome.lastLog.empty() ? std::string() : ": " + c.outcome.lastLog));
        }
      }
      if (!m_othersStarted) {
        m_othersStarted = true;  // rank 0 died before sending its NCCL id: nobody else starts
        noteFailure("rank 0 stopped before sending its NCCL id");
      }
    }
  }

  const LaunchRequest& m_request;
  const FrameCallback& m_onFrame;
  const BytesCallback& m_onBytes;
  std::vector<Child> m_children;
  const bool m_needId;
  bool m_othersStarted;
  const std::chrono::steady_clock::duration m_silenceLimit;
  bool m_silenced = false;
  LaunchOutcome m_outcome;
  std::optional<std::chrono::steady_clock::time_point> m_killAt;
  std::string m_firstFailure;
  std::vector<char> m_buffer = std::vector<char>(1 << 16);
};

}  // namespace

std::optional<std::string> findExecutor(const std::string& selfPath) {
  namespace fs = std::filesystem;
  auto executable = [](const fs::path& p) { return ::access(p.c_str(), X_OK) == 0 && fs::is_regular_file(p); };
  if (const char* env = std::getenv("PIPESTUDIO_EXEC"); env != nullptr && *env != '\0') {
    if (executable(env)) return std::string(env);
  }
  std::error_code ec;
  fs::path self = fs::canonical("/proc/self/exe", ec);
  if (ec) self = fs::absolute(selfPath, ec);
  const fs::path dir = self.parent_path();
  for (const fs::path& p : {dir / "pipestudio-exec", dir / ".." / "executor" / "pipestudio-exec"}) {
    if (executable(p)) return fs::weakly_canonical(p, ec).string();
  }
  if (const char* path = std::getenv("PATH")) {
    std::string all = path;
    for (std::size_t pos = 0; pos <= all.size();) {
      const auto next = all.find(':', pos);
      const std::string d = all.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
      if (!d.empty() && executable(fs::path(d) / "pipestudio-exec")) return (fs::path(d) / "pipestudio-exec").string();
      if (next == std::string::npos) break;
      pos = next + 1;
    }
  }
  return std::nullopt;
}

Expected<LaunchOutcome> launchLocal(const LaunchRequest& request, const FrameCallback& onFrame,
                                    const BytesCallback& onBytes) {
  LocalLaunch launch(request, onFrame, onBytes);
  PS_RETURN_IF_ERROR(launch.start());
  launch.serve();
  return launch.finish();
}

// --- the rank's side of a cluster launcher (pipestudio-exec --task) ---------------------

namespace {

// The executor this relay runs; signals are passed on to it (async-signal-safe: an atomic
// load and kill()).
std::atomic<pid_t> g_taskChild{-1};
std::atomic<int> g_taskSignal{0};

extern "C" void forwardTaskSignal(int sig) {
  g_taskSignal.store(sig);
  const pid_t child = g_taskChild.load();
  if (child > 0) ::kill(child, sig);
}

const char* envValue(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

Expected<int> envInt(const char* name, int lo, const std::string& expected) {
  const char* v = envValue(name);
  if (v == nullptr) return Error{std::string(name) + " is not set (expected " + expected + ")"};
  int value = 0;
  const std::string_view text(v);
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || p != text.data() + text.size() || value < lo || value > (1 << 20)) {
    return Error{std::string(name) + "='" + v + "' (expected an integer in " + std::to_string(lo) + "..1048576)"};
  }
  return value;
}

bool writeAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

bool isNcclIdHex(const std::string& s) {
  if (s.size() != 256) return false;  // NCCL_UNIQUE_ID_BYTES = 128
  for (const char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Ranks > 0: the id rank 0 wrote, once the file is complete (it appears by rename).
Expected<std::string> waitForNcclId(const std::string& path, double timeoutS) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(timeoutS * 1000));
  for (;;) {
    std::ifstream in(path);
    std::string hex;
    if (in && std::getline(in, hex)) {
      if (isNcclIdHex(hex)) return hex;
      return Error{path + ": not an NCCL id (expected 256 hex digits written by rank 0)"};
    }
    if (g_taskSignal.load() != 0) return Error{"stopped by signal " + std::to_string(g_taskSignal.load())};
    if (std::chrono::steady_clock::now() > deadline) {
      return Error{"rank 0's NCCL id did not appear in " + path + " within " +
                   std::to_string(static_cast<int>(timeoutS)) +
                   " s (did rank 0 start? is the job directory on a file system every node shares?)"};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

Status publishNcclId(const std::string& path, const std::string& hex) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << hex << '\n';
    out.flush();
    if (!out) return Error{"cannot write " + tmp + ": " + std::strerror(errno)};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return Error{"cannot rename " + tmp + " to " + path + ": " + std::strerror(errno)};
  return {};
}

}  // namespace

Expected<TaskOptions> parseTaskArgs(const std::vector<std::string>& args) {
  TaskOptions o;
  bool haveTask = false;
  std::size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (i + 1 >= args.size()) return Error{a + ": missing value"};
    const std::string& v = args[++i];
    if (a == "--task") {
      auto launcher = parseLauncher(v);
      if (!launcher || *launcher == pipestudio::Launcher::Ssh) {
        return Error{"--task: '" + v + "' (expected slurm or mpirun)"};
      }
      o.launcher = *launcher;
      haveTask = true;
    } else if (a == "--nccl-rendezvous") {
      o.ncclRendezvous = v;
    } else if (a == "--nccl-timeout-s") {
      char* end = nullptr;
      o.ncclTimeoutS = std::strtod(v.c_str(), &end);
      if (v.empty() || end != v.c_str() + v.size() || !(o.ncclTimeoutS > 0 && o.ncclTimeoutS <= 86400)) {
        return Error{"--nccl-timeout-s: '" + v + "' (expected seconds in (0, 86400])"};
      }
    } else {
      return Error{"unknown option '" + a + "' before -- (expected --task, --nccl-rendezvous, --nccl-timeout-s)"};
    }
  }
  if (!haveTask) return Error{"--task is required (slurm or mpirun)"};
  o.executorArgs.assign(args.begin() + static_cast<std::ptrdiff_t>(std::min(i, args.size())), args.end());
  if (o.executorArgs.empty()) return Error{"no executor options after -- (expected --plan PLAN …)"};
  return o;
}

Expected<TaskPlace> taskPlaceFromEnvironment(pipestudio::Launcher launcher) {
  TaskPlace p;
  if (launcher == pipestudio::Launcher::Slurm) {
    const std::string by = "to be started by srun";
    PS_ASSIGN_OR_RETURN(p.rank, envInt("SLURM_PROCID", 0, by));
    PS_ASSIGN_OR_RETURN(
        p.world, envValue("SLURM_NTASKS") != nullptr ? envInt("SLURM_NTASKS", 1, by) : envInt("SLURM_NPROCS", 1, by));
  } else {
    const bool ompi = envValue("OMPI_COMM_WORLD_RANK") != nullptr;
    const std::string by = "to be started by mpirun";
    auto rank = envInt(ompi ? "OMPI_COMM_WORLD_RANK" : "PMI_RANK", 0, by);
    if (!rank) return Error{rank.message() + "; neither OMPI_COMM_WORLD_RANK nor PMI_RANK is set"};
    p.rank = *rank;
    PS_ASSIGN_OR_RETURN(p.world, envInt(ompi ? "OMPI_COMM_WORLD_SIZE" : "PMI_SIZE", 1, by));
  }
  if (p.rank >= p.world) {
    return Error{"rank " + std::to_string(p.rank) + " is not below the world size " + std::to_string(p.world)};
  }
  return p;
}

int runTask(const TaskOptions& options, const TaskPlace& place, const std::string& executable, int outFd) {
  const int rank = place.rank;
  bool outputBroken = false;
  auto emit = [&](const std::string& lines) {
    if (!outputBroken && !writeAll(outFd, lines)) {
      // The launcher is gone: nobody will read this rank any more, so it must not run on.
      outputBroken = true;
      if (const pid_t c = g_taskChild.load(); c > 0) ::kill(c, SIGTERM);
    }
  };
  auto log = [&](const std::string& text) {
    std::string lines;
    trace::appendTaskLines(rank, trace::TaskLineKind::Log,
                           "pipestudio-exec --task: rank " + std::to_string(rank) + ": " + text + "\n", lines);
    emit(lines);
  };
  auto finish = [&](int status) {
    std::string lines;
    trace::appendTaskExit(rank, status, lines);
    emit(lines);
    return status;
  };

  std::vector<std::string> argv{executable};
  argv.insert(argv.end(), options.executorArgs.begin(), options.executorArgs.end());
  argv.insert(argv.end(), {"--rank", std::to_string(rank), "--world", std::to_string(place.world)});
  const bool handOver = !options.ncclRendezvous.empty() && place.world > 1;
  if (handOver && rank > 0) {
    log("waiting for rank 0's NCCL id in " + options.ncclRendezvous);
    auto id = waitForNcclId(options.ncclRendezvous, options.ncclTimeoutS);
    if (!id) {
      log(id.message());
      return finish(1);
    }
    argv.insert(argv.end(), {"--nccl-id", *id});
  }

  Child c;
  c.rank = rank;
  if (auto st = spawnRank(c, argv); !st) {
    log(st.message());
    return finish(127);
  }
  g_taskChild.store(c.pid);
  if (g_taskSignal.load() != 0) ::kill(c.pid, g_taskSignal.load());  // a signal that came before the pid was known

  bool idPublished = !handOver || rank > 0;
  int forwarded = 0;
  std::vector<char> buffer(1 << 16);
  while (c.out >= 0 || c.err >= 0) {
    std::vector<pollfd> fds;
    if (c.out >= 0) fds.push_back({c.out, POLLIN, 0});
    if (c.err >= 0) fds.push_back({c.err, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 200);
    if (const int sig = g_taskSignal.load(); sig != 0 && forwarded != sig) {
      forwarded = sig;
      log(std::string("passing ") + strsignal(sig) + " on to the executor");
    }
    for (const pollfd& p : fds) {
      if (p.revents == 0) continue;
      const ssize_t n = ::read(p.fd, buffer.data(), buffer.size());
      if (n < 0 && errno == EINTR) continue;
      const bool isOut = p.fd == c.out;
      if (n <= 0) {
        ::close(p.fd);
        (isOut ? c.out : c.err) = -1;
        continue;
      }
      const std::string_view bytes(buffer.data(), static_cast<std::size_t>(n));
      std::string lines;
      trace::appendTaskLines(rank, isOut ? trace::TaskLineKind::Stream : trace::TaskLineKind::Log, bytes, lines);
      emit(lines);
      if (isOut && !idPublished) {
        c.decoder.feed(bytes);
        while (auto frame = c.decoder.next()) {
          if (const auto* id = std::get_if<trace::NcclId>(&*frame)) {
            if (auto st = publishNcclId(options.ncclRendezvous, hex(id->bytes)); !st) log(st.message());
            idPublished = true;
            break;
          }
        }
        if (c.decoder.error()) idPublished = true;  // nothing more to find in a corrupt stream
      }
    }
  }
  int status = 0;
  while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_taskChild.store(-1);
  const int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  if (WIFSIGNALED(status)) {
    log(std::string("the executor was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
        strsignal(WTERMSIG(status)) + ")");
  }
  return finish(code);
}

int taskMain(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  const std::vector<std::string> args(argv + 1, argv + argc);
  auto options = parseTaskArgs(args);
  if (!options) {
    std::cerr << "pipestudio-exec --task: " << options.message() << '\n';
    return 2;
  }
  auto place = taskPlaceFromEnvironment(options->launcher);
  if (!place) {
    // No rank to tag lines with: the launcher shows this on its own stderr.
    std::cerr << "pipestudio-exec --task " << name(options->launcher) << ": " << place.message() << '\n';
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = &forwardTaskSignal;
  sigemptyset(&sa.sa_mask);
  for (const int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2}) ::sigaction(sig, &sa, nullptr);
  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) self = argv[0];
  return runTask(*options, *place, self, STDOUT_FILENO);
}

}  // namespace pipestudio::exec
