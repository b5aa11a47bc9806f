#include "pipestudio/common/SourceText.hpp"

#include <array>
#include <cstdio>
#include <optional>

#include "pipestudio/common/Text.hpp"

namespace pipestudio {
namespace {

// One code point of `text` at `i` and its length in bytes; nullopt where no valid UTF-8
// sequence starts there (RFC 3629 §4, the ranges utf8Lead gives).
struct Decoded {
  char32_t cp = 0;
  std::size_t bytes = 1;
};
std::optional<Decoded> decodeAt(std::string_view text, std::size_t i) {
  const auto first = static_cast<unsigned char>(text[i]);
  if (first < 0x80) return Decoded{first, 1};
  const std::optional<Utf8Lead> lead = utf8Lead(first);
  if (!lead) return std::nullopt;
  const auto more = static_cast<std::size_t>(lead->continuationBytes);
  if (i + more >= text.size()) return std::nullopt;
  char32_t cp = first & (0x3F >> more);
  for (std::size_t k = 1; k <= more; ++k) {
    const auto c = static_cast<unsigned char>(text[i + k]);
    if (c < (k == 1 ? lead->firstLo : 0x80) || c > (k == 1 ? lead->firstHi : 0xBF)) return std::nullopt;
    cp = (cp << 6) | (c & 0x3F);
  }
  return Decoded{cp, more + 1};
}

void appendHex(std::string& out, const char* format, unsigned value) {
  std::array<char, 16> buf{};
  std::snprintf(buf.data(), buf.size(), format, value);
  out += buf.data();
}

// \uXXXX or \UXXXXXXXX: the escape Python and TOML share for a code point.
void appendUnicodeEscape(std::string& out, char32_t cp) {
  if (cp <= 0xFFFF) {
    appendHex(out, "\\u%04x", static_cast<unsigned>(cp));
  } else {
    appendHex(out, "\\U%08x", static_cast<unsigned>(cp));
  }
}

bool isControl(char32_t cp) { return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F); }

// Code points that end a line for some reader, or reorder what a reader sees (Unicode TR9
// explicit directional formatting: the "Trojan Source" characters, CVE-2021-42574).
bool isInvisibleFormatting(char32_t cp) {
  return cp == 0x2028 || cp == 0x2029 || cp == 0x061C || cp == 0x200E || cp == 0x200F ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0xFEFF;
}

// The short escapes Python, TOML and comments share; false where `c` has none.
bool appendShortEscape(std::string& out, char32_t c) {
  switch (c) {
    case '\n':
      out += "\\n";
      return true;
    case '\r':
      out += "\\r";
      return true;
    case '\t':
      out += "\\t";
      return true;
    case '\\':
      out += "\\\\";
      return true;
    default:
      return false;
  }
}

std::string python(std::string_view text, bool docstring) {
  std::string out = docstring ? "" : "\"";
  for (std::size_t i = 0; i < text.size();) {
    const std::optional<Decoded> d = decodeAt(text, i);
    if (!d) {
      // surrogateescape: byte b (0x80..0xFF) is U+DC00 + b.
      appendHex(out, "\\udc%02x", static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    const char32_t cp = d->cp;
    const std::string_view bytes = text.substr(i, d->bytes);
    i += d->bytes;
    if (cp == '\n' && docstring) {
      out += '\n';
    } else if (cp == '"') {
      // In a docstring a quote is escaped only where it could start a closing """: before
      // another quote, or last (before the closing delimiter).
      const bool closes = i == text.size() || text[i] == '"';
      out += !docstring || closes ? "\\\"" : "\"";
    } else if (appendShortEscape(out, cp)) {
      continue;
    } else if (cp < 0x20 || cp == 0x7F) {
      appendHex(out, "\\x%02x", static_cast<unsigned>(cp));
    } else if (cp < 0x80 || (docstring && !isControl(cp) && !isInvisibleFormatting(cp))) {
      out.append(bytes);
    } else {
      appendUnicodeEscape(out, cp);
    }
  }
  return docstring ? out : out + "\"";
}

Expected<std::string> toml(std::string_view text) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size();) {
    const std::optional<Decoded> d = decodeAt(text, i);
    if (!d) {
      return Error{"'" + excerpt(text) + "' is not UTF-8 at byte " + std::to_string(i) +
                   " (a TOML document holds UTF-8 text only)"};
    }
    const char32_t cp = d->cp;
    i += d->bytes;
    if (cp == '"') {
      out += "\\\"";
    } else if (cp == '\b') {
      out += "\\b";
    } else if (cp == '\f') {
      out += "\\f";
    } else if (appendShortEscape(out, cp)) {
      continue;
    } else if (cp >= 0x20 && cp < 0x7F) {
      out += static_cast<char>(cp);
    } else {
      appendUnicodeEscape(out, cp);
    }
  }
  return out + "\"";
}

bool shellSafe(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') ||
         std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
}

Expected<std::string> shellWord(std::string_view text) {
  if (text.find('\0') != std::string_view::npos) {
    return Error{"'" + excerpt(text) + "' holds a NUL byte, which no shell word or program argument can carry"};
  }
  bool safe = !text.empty();
  for (const char c : text) safe = safe && shellSafe(c);
  return safe ? std::string(text) : shellQuote(text);
}

std::string comment(std::string_view text) {
  const std::string repaired = repairUtf8(text);
  std::string out;
  out.reserve(repaired.size());
  for (std::size_t i = 0; i < repaired.size();) {
    const Decoded d = decodeAt(repaired, i).value_or(Decoded{0xFFFD, 1});  // repaired: always valid
    const std::size_t at = i;
    i += d.bytes;
    if (d.cp == 0x1B) {
      out += "\\e";
    } else if (appendShortEscape(out, d.cp)) {
      continue;
    } else if (d.cp < 0x20 || d.cp == 0x7F) {
      appendHex(out, "\\x%02x", static_cast<unsigned>(d.cp));
    } else if (isControl(d.cp) || isInvisibleFormatting(d.cp)) {
      appendUnicodeEscape(out, d.cp);
    } else {
      out.append(repaired, at, d.bytes);
    }
  }
  return out;
}

}  // namespace

Expected<std::string> sourceText(SourceContext context, std::string_view text) {
  switch (context) {
    case SourceContext::PythonString:
      return python(text, false);
    case SourceContext::PythonDocstring:
      return python(text, true);
    case SourceContext::TomlString:
      return toml(text);
    case SourceContext::ShellWord:
      return shellWord(text);
    case SourceContext::Comment:
      return comment(text);
  }
  return Error{"unknown source context"};
}

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

}  // namespace pipestudio
