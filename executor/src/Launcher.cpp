#include "pipestudio/executor/Launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>

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
  int outPipe[2], errPipe[2];
  if (::pipe2(outPipe, O_CLOEXEC) != 0 || ::pipe2(errPipe, O_CLOEXEC) != 0) {
    return Error{std::string("pipe: ") + std::strerror(errno)};
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, outPipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, errPipe[1], STDERR_FILENO);
  std::vector<char*> argv;
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
  return {};
}

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
  auto argsFor = [&](int rank, const std::string& ncclId) {
    std::vector<std::string> a{request.executable, "--plan", request.planPath, "--backend", request.backend,
                               "--iterations", std::to_string(request.iterations), "--warmup",
                               std::to_string(request.warmup)};
    if (!request.runId.empty()) a.insert(a.end(), {"--run-id", request.runId});
    if (request.world > 1 || request.backend == "cuda") {
      a.insert(a.end(), {"--rank", std::to_string(rank), "--world", std::to_string(request.world)});
    }
    if (!ncclId.empty()) a.insert(a.end(), {"--nccl-id", ncclId});
    a.insert(a.end(), request.extraArgs.begin(), request.extraArgs.end());
    return a;
  };
  std::vector<Child> children(static_cast<std::size_t>(std::max(1, request.world)));
  for (std::size_t r = 0; r < children.size(); ++r) {
    children[r].rank = static_cast<int>(r);
    children[r].outcome.rank = static_cast<int>(r);
  }
  if (auto st = spawnRank(children[0], argsFor(0, "")); !st) return st.error();
  // Ranks > 0 of the cuda backend need rank 0's NCCL id: they start when it arrives.
  const bool needId = request.backend == "cuda" && children.size() > 1;
  bool othersStarted = !needId;
  if (!needId) {
    for (std::size_t r = 1; r < children.size(); ++r) {
      if (auto st = spawnRank(children[r], argsFor(static_cast<int>(r), "")); !st) return st.error();
    }
  }

  LaunchOutcome outcome;
  std::optional<std::chrono::steady_clock::time_point> killAt;
  std::string firstFailure;
  auto noteFailure = [&](const std::string& why) {
    if (firstFailure.empty()) firstFailure = why;
    if (!killAt) {
      killAt = std::chrono::steady_clock::now() +
               std::chrono::milliseconds(static_cast<std::int64_t>(request.peerExitTimeoutS * 1000));
    }
  };
  std::vector<char> buffer(1 << 16);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, bool>> owners;  // (child, is stdout)
    for (Child& c : children) {
      if (c.out >= 0) fds.push_back({c.out, POLLIN, 0}), owners.emplace_back(&c, true);
      if (c.err >= 0) fds.push_back({c.err, POLLIN, 0}), owners.emplace_back(&c, false);
    }
    bool running = false;
    for (Child& c : children) running = running || (c.pid > 0 && !c.exited);
    if (fds.empty() && !running && othersStarted) break;
    if (!outcome.stopped && request.stopRequested) {
      if (auto why = request.stopRequested()) {
        // Stopped from outside (a signal, a full history disk): ask the ranks to end, then
        // make sure they have.
        outcome.stopped = true;
        firstFailure = *why;
        for (Child& c : children) {
          if (c.pid > 0 && !c.exited) ::kill(c.pid, SIGTERM);
        }
        othersStarted = true;  // ranks not started yet never will be
        killAt = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      }
    }
    if (killAt && std::chrono::steady_clock::now() >= *killAt) {
      for (Child& c : children) {
        if (c.pid > 0 && !c.exited) ::kill(c.pid, SIGKILL);
      }
      killAt = std::chrono::steady_clock::now() + std::chrono::hours(24);
    }
    ::poll(fds.data(), fds.size(), 100);
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Child& c = *owners[i].first;
      const bool isOut = owners[i].second;
      const ssize_t n = ::read(fds[i].fd, buffer.data(), buffer.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fds[i].fd);
        (isOut ? c.out : c.err) = -1;
        continue;
      }
      if (!isOut) {
        for (ssize_t k = 0; k < n; ++k) {
          const char ch = buffer[static_cast<std::size_t>(k)];
          if (ch == '\n') {
            std::cerr << "[rank " << c.rank << "] " << c.errLine << '\n';
            c.outcome.lastLog = c.errLine;
            c.errLine.clear();
          } else if (c.errLine.size() < 4096) {
            c.errLine += ch;
          }
        }
        continue;
      }
      const std::string_view bytes(buffer.data(), static_cast<std::size_t>(n));
      if (onBytes) onBytes(c.rank, bytes);
      c.decoder.feed(bytes);
      while (auto frame = c.decoder.next()) {
        ++c.outcome.frames;
        if (const auto* id = std::get_if<trace::NcclId>(&*frame); id != nullptr && !othersStarted) {
          for (std::size_t r = 1; r < children.size(); ++r) {
            if (auto st = spawnRank(children[r], argsFor(static_cast<int>(r), hex(id->bytes))); !st) {
              noteFailure("rank " + std::to_string(r) + ": " + st.message());
            }
          }
          othersStarted = true;
        }
        if (const auto* e = std::get_if<trace::ErrorReport>(&*frame)) {
          noteFailure("rank " + std::to_string(e->rank) + " failed: " + e->message);
        }
        if (onFrame) onFrame(c.rank, *frame);
      }
    }
    for (Child& c : children) {
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
          noteFailure("rank " + std::to_string(c.rank) + " exited with status " +
                      std::to_string(c.outcome.exitStatus) +
                      (c.outcome.lastLog.empty() ? std::string() : ": " + c.outcome.lastLog));
        }
      }
      if (!othersStarted) {
        othersStarted = true;  // rank 0 died before sending its NCCL id: nobody else starts
        noteFailure("rank 0 stopped before sending its NCCL id");
      }
    }
  }
  for (Child& c : children) {
    if (!c.errLine.empty()) {
      std::cerr << "[rank " << c.rank << "] " << c.errLine << '\n';
      c.outcome.lastLog = c.errLine;
    }
    c.outcome.truncatedBytes = c.decoder.pendingBytes();
    c.outcome.streamError = c.decoder.error();
    if (c.outcome.streamError) noteFailure("rank " + std::to_string(c.rank) + ": " + *c.outcome.streamError);
    outcome.ranks.push_back(c.outcome);
  }
  outcome.ok = firstFailure.empty();
  outcome.failure = firstFailure;
  return outcome;
}

}  // namespace pipestudio::exec
