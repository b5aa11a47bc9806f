#include "pipestudio/remote/LauncherOutput.hpp"

#include "pipestudio/trace/TaskLines.hpp"

namespace pipestudio::remote {
namespace {

constexpr int kIncomplete = -1;
constexpr std::size_t kMaxTagNumberDigits = 10;

// Length of the Open MPI output tag "[job,rank]<stdout>:" at the start of `s` (also <stderr>,
// <stddiag>); 0 when `s` does not start with one; kIncomplete when `s` ends inside what could
// still become one.
int matchTag(std::string_view s, int& rank, bool& isStderr) {
  std::size_t i = 0;
  auto need = [&](std::size_t n) { return i + n > s.size(); };
  if (s.empty() || s[0] != '[') return 0;
  ++i;
  long long numbers[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    const std::size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      if (i - start >= kMaxTagNumberDigits) return 0;
      numbers[k] = numbers[k] * 10 + (s[i] - '0');
      ++i;
    }
    if (need(1)) return kIncomplete;
    if (i == start || s[i] != (k == 0 ? ',' : ']')) return 0;
    ++i;
  }
  if (need(1)) return kIncomplete;
  if (s[i] != '<') return 0;
  ++i;
  for (const std::string_view name :
       {std::string_view("stdout>:"), std::string_view("stderr>:"), std::string_view("stddiag>:")}) {
    const std::string_view rest = s.substr(i);
    const std::size_t n = std::min(rest.size(), name.size());
    if (rest.substr(0, n) != name.substr(0, n)) continue;
    if (n < name.size()) return kIncomplete;
    if (numbers[1] > (1 << 20)) return 0;
    rank = static_cast<int>(numbers[1]);
    isStderr = name[3] == 'e' || name[3] == 'd';  // stderr, stddiag
    return static_cast<int>(i + name.size());
  }
  return 0;
}

}  // namespace

void LauncherOutput::feed(std::string_view bytes, bool fromStderr) {
  if (m_tags == Tags::OpenMpi) {
    feedTagged(bytes, fromStderr);
  } else {
    appendText({-1, fromStderr}, bytes);
  }
}

void LauncherOutput::feedTagged(std::string_view bytes, bool fromStderr) {
  const int ch = fromStderr ? 1 : 0;
  std::string data = std::move(m_held[ch]);
  m_held[ch].clear();
  data.append(bytes);
  const std::string_view all(data);
  std::size_t segment = 0;
  std::size_t pos = 0;
  for (;;) {
    const std::size_t bracket = all.find('[', pos);
    if (bracket == std::string_view::npos) break;
    int rank = -1;
    bool isStderr = false;
    const int n = matchTag(all.substr(bracket), rank, isStderr);
    if (n == kIncomplete) {
      appendText(m_current[ch], all.substr(segment, bracket - segment));
      m_held[ch] = std::string(all.substr(bracket));
      return;
    }
    if (n == 0) {
      pos = bracket + 1;
      continue;
    }
    appendText(m_current[ch], all.substr(segment, bracket - segment));
    m_current[ch] = {rank, isStderr};
    segment = pos = bracket + static_cast<std::size_t>(n);
  }
  appendText(m_current[ch], all.substr(segment));
}

void LauncherOutput::appendText(const Source& source, std::string_view text) {
  if (text.empty()) return;
  std::string& pending = m_lines[source];
  std::size_t start = 0;
  for (;;) {
    const std::size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) break;
    pending.append(text.substr(start, nl - start));
    emitLine(source, std::move(pending));
    pending.clear();
    start = nl + 1;
  }
  pending.append(text.substr(start));
  if (pending.size() > kMaxLineBytes) {
    m_items.push_back(Item{Item::Kind::Text, source.first, std::move(pending) + "\n", 0});
    pending.clear();
  }
}

void LauncherOutput::emitLine(const Source& source, std::string line) {
  trace::TaskLine parsed;
  std::string why;
  switch (trace::parseTaskLine(line, parsed, &why)) {
    case trace::TaskLineParse::Ok: {
      Item item;
      item.rank = parsed.rank;
      item.kind = parsed.kind == trace::TaskLineKind::Stream ? Item::Kind::Stream
                  : parsed.kind == trace::TaskLineKind::Log  ? Item::Kind::Log
                                                             : Item::Kind::Exit;
      item.bytes = std::move(parsed.bytes);
      item.status = parsed.status;
      m_items.push_back(std::move(item));
      return;
    }
    case trace::TaskLineParse::Malformed: {
      constexpr std::size_t kShown = 80;
      std::string shown = line.substr(0, kShown) + (line.size() > kShown ? "…" : "");
      m_items.push_back(Item{Item::Kind::Malformed, source.first, why + ": " + shown, 0});
      return;
    }
    case trace::TaskLineParse::NotATaskLine:
      m_items.push_back(Item{Item::Kind::Text, source.first, std::move(line) + "\n", 0});
      return;
  }
}

void LauncherOutput::finish() {
  for (int ch = 0; ch < 2; ++ch) {
    if (!m_held[ch].empty()) {
      const std::string held = std::move(m_held[ch]);
      m_held[ch].clear();
      appendText(m_current[ch], held);
    }
  }
  for (auto& [source, pending] : m_lines) {
    if (!pending.empty()) emitLine(source, std::move(pending));
    pending.clear();
  }
}

std::vector<LauncherOutput::Item> LauncherOutput::take() {
  std::vector<Item> out;
  out.swap(m_items);
  return out;
}

}  // namespace pipestudio::remote
