#include "pipestudio/common/Text.hpp"

#include <array>
#include <cstdio>

namespace pipestudio {
namespace {

void appendHex(std::string& out, unsigned value, const char* format) {
  std::array<char, 12> buf{};
  std::snprintf(buf.data(), buf.size(), format, value);
  out += buf.data();
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

namespace {

// Length of the valid UTF-8 sequence starting at text[i], or 0 when none starts there
// (RFC 3629 §4: the second byte's range depends on the lead byte).
std::size_t utf8SequenceLength(std::string_view text, std::size_t i) {
  const auto first = static_cast<unsigned char>(text[i]);
  if (first < 0x80) return 1;
  const std::optional<Utf8Lead> lead = utf8Lead(first);
  if (!lead) return 0;
  const auto more = static_cast<std::size_t>(lead->continuationBytes);
  for (std::size_t k = 1; k <= more; ++k) {
    if (i + k >= text.size()) return 0;
    const auto c = static_cast<unsigned char>(text[i + k]);
    if (c < (k == 1 ? lead->firstLo : 0x80) || c > (k == 1 ? lead->firstHi : 0xBF)) return 0;
  }
  return more + 1;
}

}  // namespace

void appendUtf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool isValidUtf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    // ASCII runs are the common case: skip them without the sequence logic.
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const std::size_t n = utf8SequenceLength(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string repairUtf8(std::string_view text) {
  if (isValidUtf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 16);
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8SequenceLength(text, i);
    if (n > 0) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
    // Skip the lead byte and the continuation bytes that followed it: one replacement per
    // broken sequence, not per byte.
    ++i;
    while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) ++i;
  }
  return out;
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
