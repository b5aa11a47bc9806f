#include "pipestudio/common/Text.hpp"

#include <cstdio>

namespace pipestudio {
namespace {

void appendHex(std::string& out, unsigned value, const char* format) {
  char buf[12];
  std::snprintf(buf, sizeof buf, format, value);
  out += buf;
}

}  // namespace

std::string escapeControl(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    // U+0080..U+009F in UTF-8 (C2 80..C2 9F): C1 controls such as CSI, which some terminals obey.
    if (c == 0xC2 && i + 1 < text.size()) {
      const auto next = static_cast<unsigned char>(text[i + 1]);
      if (next >= 0x80 && next <= 0x9F) {
        appendHex(out, next, "\\u%04x");
        ++i;
        continue;
      }
    }
    switch (c) {
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case 0x1B:
        out += "\\e";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      default:
        break;
    }
    if (c < 0x20 || c == 0x7F) {
      appendHex(out, c, "\\x%02x");
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string excerpt(std::string_view text, std::size_t maxBytes) {
  if (text.size() <= maxBytes) return escapeControl(text);
  std::size_t cut = maxBytes;
  // Do not split a UTF-8 sequence: step back over continuation bytes.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return escapeControl(text.substr(0, cut)) + "… (" + std::to_string(text.size()) + " bytes)";
}

std::string joinNames(const std::vector<std::string>& names, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += separator;
    out += names[i];
  }
  return out;
}

std::string choiceList(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

}  // namespace pipestudio
