#pragma once
// A shell command run to its end, for tests that drive the CLI or a script as a user would:
//
//     const test::CommandResult r = test::runCommand(cli + " plan bad.json 2>&1");
//     EXPECT_EQ(r.status, 1) << r.out;

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace pipestudio::test {

struct CommandResult {
  int status = -1;  ///< the exit status; -1 when the command could not start or was killed
  std::string out;  ///< everything it wrote on stdout
};

/// Runs `command` through /bin/sh and reads its stdout to the end.
inline CommandResult runCommand(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer{};
  while (const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) r.out.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace pipestudio::test
