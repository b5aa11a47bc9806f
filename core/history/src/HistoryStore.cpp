// HistoryStore: names of statuses and categories, the default location, and the small
// accessors. The rest of the store is split by concern: StoreOpen.cpp (open, migrate,
// recover), EventWriter.cpp (batched event writes), Runs.cpp (run rows and their events),
// RunAsPlan.cpp (stored plans, a run read back as a plan), ProcessProbe.cpp (is a writer alive).
#include <pwd.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "Impl.hpp"

namespace pipestudio::history {

using detail::exec;
using detail::Statement;

namespace {

constexpr std::array<std::string_view, 4> kStatusNames = {"running", "complete", "incomplete", "failed"};
constexpr std::array<std::string_view, kEventCategoryCount> kCategoryNames = {"op",   "kernel",  "memcpy", "memset",
                                                                              "nccl", "runtime", "cpu"};

}  // namespace

std::string_view runStatusName(RunStatus status) { return kStatusNames[static_cast<std::size_t>(status)]; }

std::optional<RunStatus> runStatusFromName(std::string_view name) {
  for (std::size_t i = 0; i < kStatusNames.size(); ++i) {
    if (kStatusNames[i] == name) return static_cast<RunStatus>(i);
  }
  return std::nullopt;
}

std::string_view eventCategoryName(EventCategory category) {
  return kCategoryNames[static_cast<std::size_t>(category)];
}

std::string hostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

std::int64_t nowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string defaultHistoryPath() {
  namespace fs = std::filesystem;
  const char* xdg = std::getenv("XDG_DATA_HOME");
  fs::path base;
  if (xdg && *xdg && fs::path(xdg).is_absolute()) {
    base = xdg;  // the XDG spec says relative values are to be ignored
  } else {
    const char* home = std::getenv("HOME");
    std::string dir = home && *home ? home : "";
    if (dir.empty()) {
      if (const passwd* pw = getpwuid(geteuid()); pw != nullptr && pw->pw_dir != nullptr) dir = pw->pw_dir;
    }
    if (dir.empty() || !fs::path(dir).is_absolute()) return {};  // never ./.local in the working directory
    base = fs::path(dir) / ".local" / "share";
  }
  return (base / "pipestudio" / "history.sqlite").string();
}

// ---- HistoryStore -----------------------------------------------------------------------

HistoryStore::HistoryStore(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
HistoryStore::HistoryStore(HistoryStore&&) noexcept = default;
HistoryStore& HistoryStore::operator=(HistoryStore&&) noexcept = default;
HistoryStore::~HistoryStore() = default;

const std::string& HistoryStore::path() const { return m_impl->path; }
int HistoryStore::schemaVersion() const { return m_impl->version; }
sqlite3* HistoryStore::connection() const { return m_impl->db; }
void HistoryStore::setBatchRows(int rows) { m_impl->batchRows = std::max(1, rows); }
Status HistoryStore::flush() { return m_impl->commit(); }

}  // namespace pipestudio::history
