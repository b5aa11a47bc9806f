#include "pipestudio/remote/ShellQuote.hpp"

namespace pipestudio::remote {

std::string shellQuote(std::string_view word) {
  std::string out;
  out.reserve(word.size() + 2);
  out.push_back('\'');
  for (const char c : word) {
    if (c == '\0') continue;  // argv cannot carry NUL; dropping it keeps the word well formed
    if (c == '\'') {
      out += "'\\''";  // close the quote, an escaped quote, reopen
    } else {
      out.push_back(c);
    }
  }
  out.push_back('\'');
  return out;
}

std::string joinShellWords(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out.push_back(' ');
    out += shellQuote(w);
  }
  return out;
}

}  // namespace pipestudio::remote
