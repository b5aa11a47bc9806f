#pragma once
// Runs the real binaries as a user would: argv without a shell, stdout/stderr to files,
// optional stdin, a deadline (a hang is a failure, not a stuck test).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace hostile {

inline const std::string kCli = std::string(PIPESTUDIO_BINARY_DIR) + "/app/pipestudio-cli";
inline const std::string kExec = std::string(PIPESTUDIO_BINARY_DIR) + "/executor/pipestudio-exec";
inline const std::string kData = std::string(PIPESTUDIO_TEST_DATA) + "/../hostile/data/";
inline const std::string kGood = std::string(PIPESTUDIO_TEST_DATA) + "/good/";

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void spit(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

/// `bytes` as lowercase hex, two digits a byte.
inline std::string hexOf(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

/// A fresh directory per test process.
inline std::filesystem::path tempDir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("pipestudio-hostile-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

struct Result {
  int exitCode = -1;  ///< 128 + signal when killed; -2 when it passed the deadline
  std::string out;
  std::string err;
};

struct SpawnOptions {
  std::string stdinPath = "/dev/null";
  std::string stdoutPath;  ///< empty: a temp file whose text comes back in Result::out
  double deadlineS = 120;
};

/// Starts argv[0] with argv; returns the pid (stdout/stderr go to the given files).
inline pid_t start(const std::vector<std::string>& args, const std::string& outPath, const std::string& errPath,
                   const std::string& inPath = "/dev/null") {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, inPath.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, outPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, errPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  argv.reserve(copy.size() + 1);
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, copy[0].c_str(), &actions, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

/// Waits for `pid` at most `deadlineS`; kills it (and reports -2) past that.
inline int waitFor(pid_t pid, double deadlineS) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadlineS);
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -2;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

inline Result run(const std::vector<std::string>& args, const SpawnOptions& options = {}) {
  static int counter = 0;
  const std::string outPath =
      options.stdoutPath.empty() ? (tempDir() / ("out" + std::to_string(counter))).string() : options.stdoutPath;
  const std::string errPath = (tempDir() / ("err" + std::to_string(counter++))).string();
  Result r;
  const pid_t pid = start(args, outPath, errPath, options.stdinPath);
  if (pid < 0) {
    r.err = "cannot start " + args[0];
    return r;
  }
  r.exitCode = waitFor(pid, options.deadlineS);
  if (options.stdoutPath.empty()) r.out = slurp(outPath);
  r.err = slurp(errPath);
  return r;
}

/// pipestudio-cli ARGS.
inline Result cli(const std::vector<std::string>& args, const SpawnOptions& options = {}) {
  // A new vector rather than an insert at the front: GCC 12 at -O3 reports a false
  // -Warray-bounds through vector::insert of an initializer list's copy.
  std::vector<std::string> all;
  all.reserve(args.size() + 1);
  all.emplace_back(kCli);
  all.insert(all.end(), args.begin(), args.end());
  return run(all, options);
}

/// Runs the shell `script` as root of a private mount namespace (unshare -rm), where it may
/// mount what it needs (a small tmpfs on /mnt, a read-only bind) without touching the machine.
inline Result runUnshared(const std::string& script, double deadlineS) {
  return run({"/usr/bin/unshare", "-rm", "/bin/sh", "-c", script},
             {.stdinPath = "/dev/null", .stdoutPath = "", .deadlineS = deadlineS});
}

/// Whether `unshare -rm` (a private mount namespace as an unprivileged root) works here: the
/// disk-full and read-only-mount tests need it.
inline bool haveMountNamespace() {
  return run({"/usr/bin/unshare", "-rm", "/bin/sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"}, {}).exitCode == 0;
}

}  // namespace hostile
