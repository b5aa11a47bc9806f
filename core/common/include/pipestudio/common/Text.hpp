#pragma once
/// \file Echoing untrusted text (names, CSV cells, host fields) in messages and listings:
/// control characters escaped, long input cut to an excerpt that says how long it was.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipestudio {

/// How many bytes of untrusted text a message quotes before cutting it.
inline constexpr std::size_t kExcerptBytes = 80;

/// `text` with every control character (C0, DEL, and the C1 range of UTF-8) written as an
/// escape (\n, \t, \e, \x07, \u009b …) so it can neither move the cursor, ring the bell nor
/// start a new line on a terminal; UTF-8 text otherwise passes unchanged.
std::string escapeControl(std::string_view text);

/// escapeControl(text) cut to about `maxBytes` (at a UTF-8 boundary) with "… (N bytes)"
/// appended when cut: what a message quotes of a name or a cell.
std::string excerpt(std::string_view text, std::size_t maxBytes = kExcerptBytes);

/// What may follow a UTF-8 lead byte (RFC 3629 §4): how many continuation bytes, and the range
/// of the first one (the ranges that rule out overlong forms, surrogates and code points past
/// U+10FFFF; later continuation bytes are 0x80..0xBF). nullopt for a byte that cannot lead a
/// multi-byte sequence (ASCII, a continuation byte, C0, C1, F5..FF).
struct Utf8Lead {
  int continuationBytes = 0;
  unsigned char firstLo = 0x80;
  unsigned char firstHi = 0xBF;
};
constexpr std::optional<Utf8Lead> utf8Lead(unsigned char lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return Utf8Lead{1, 0x80, 0xBF};
  if (lead >= 0xE0 && lead <= 0xEF) {
    return Utf8Lead{2, static_cast<unsigned char>(lead == 0xE0 ? 0xA0 : 0x80),
                    static_cast<unsigned char>(lead == 0xED ? 0x9F : 0xBF)};
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    return Utf8Lead{3, static_cast<unsigned char>(lead == 0xF0 ? 0x90 : 0x80),
                    static_cast<unsigned char>(lead == 0xF4 ? 0x8F : 0xBF)};
  }
  return std::nullopt;
}

/// Appends code point `cp` (at most U+10FFFF) to `out` in UTF-8.
void appendUtf8(std::string& out, char32_t cp);

/// Whether `text` is UTF-8 as RFC 3629 defines it: no overlong forms, no surrogates, nothing
/// past U+10FFFF, no sequence cut short.
bool isValidUtf8(std::string_view text);

/// `text` with each broken UTF-8 sequence (a stray byte and the continuation bytes after it)
/// replaced by one U+FFFD; valid text is returned unchanged. What the history applies to all text it stores and reads
/// back, so one stray byte from a trace or a terminal never breaks a JSON listing.
std::string repairUtf8(std::string_view text);

/// `names` joined by `separator` ("none|greedy" in a CLI help text).
std::string joinNames(const std::vector<std::string>& names, std::string_view separator);
/// "a, b or c": a list of choices as an "expected …" message names them.
std::string choiceList(const std::vector<std::string>& names);

}  // namespace pipestudio
