#pragma once
// Whole files and the process table, for tests that look at what a run left behind (its
// processes, its logs):
//
//     for (const test::ProcessEntry& p : test::processTable())
//       if (p.ppid == launcher && p.state != 'Z') children.push_back(p.pid);

#include <dirent.h>
#include <sys/types.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace pipestudio::test {

/// The bytes of the file at `path`; "" when it cannot be read.
inline std::string wholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct ProcessEntry {
  pid_t pid = 0;
  pid_t ppid = 0;
  char state = 0;  ///< R, S, D, Z, …
};

/// Every process in /proc with its state and parent (/proc/<pid>/stat, fields 3 and 4, read
/// after the command name's closing parenthesis, which may itself hold spaces or parentheses).
inline std::vector<ProcessEntry> processTable() {
  std::vector<ProcessEntry> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const auto pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    const std::string stat = wholeFile("/proc/" + std::string(e->d_name) + "/stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    ProcessEntry p;
    p.pid = pid;
    rest >> p.state >> p.ppid;
    out.push_back(p);
  }
  ::closedir(d);
  return out;
}

}  // namespace pipestudio::test
