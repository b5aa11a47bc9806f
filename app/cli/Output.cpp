#include "Output.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "Commands.hpp"

namespace pipestudio::cli {
namespace {

std::string& carried() {
  static std::string what;
  return what;
}

}  // namespace

void guardStandardDescriptors() {
  for (const int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    // open() returns the lowest free descriptor: this one.
    const int opened = ::open("/dev/null", fd == STDERR_FILENO ? O_WRONLY : O_RDONLY);
    if (opened >= 0 && opened != fd) ::close(opened);
  }
}

void noteOutputCarries(std::string what) { carried() = std::move(what); }

CheckedStdout::CheckedStdout() : m_buffer(STDOUT_FILENO) { m_previous = std::cout.rdbuf(&m_buffer); }

CheckedStdout::~CheckedStdout() { std::cout.rdbuf(m_previous); }

int CheckedStdout::finish(int exitCode) {
  if (m_buffer.flush()) return exitCode;
  std::cerr << "pipestudio-cli: cannot write to standard output: " << m_buffer.errorText()
            << (carried().empty() ? "" : "; " + carried()) << '\n';
  return exitCode == kExitOk ? kExitFailure : exitCode;
}

}  // namespace pipestudio::cli
