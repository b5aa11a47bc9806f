#pragma once
// A program run to its end without a shell (no quoting), its stdout and stderr kept apart in
// files, for tests that drive a binary as a user would:
//
//     const test::SpawnResult r = test::spawnToFiles({cli, "validate", path}, {}, outPath, errPath);
//     EXPECT_EQ(r.exitCode, 1) << r.err;

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace pipestudio::test {

struct SpawnResult {
  int exitCode = -1;  ///< 128 + the signal for a killed program; -1 when it could not start
  std::string out;
  std::string err;  ///< stderr, or why the program could not start
};

/// What `path` holds (empty when it cannot be read).
inline std::string fileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs `args[0]` (a path, or a name found on PATH) with `args` in the environment `env` (empty:
/// this process's), stdin from /dev/null, stdout into `outPath` and stderr into `errPath`, waits
/// for it and reads both files back.
inline SpawnResult spawnToFiles(std::vector<std::string> args, std::vector<std::string> env, const std::string& outPath,
                                const std::string& errPath) {
  std::vector<char*> argv;
  std::vector<char*> envp;
  argv.reserve(args.size() + 1);
  envp.reserve(env.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, outPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, errPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = 0;
  SpawnResult r;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), env.empty() ? environ : envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    r.err = "posix_spawn failed: " + std::to_string(rc);
    return r;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = fileText(outPath);
  r.err = fileText(errPath);
  return r;
}

}  // namespace pipestudio::test
