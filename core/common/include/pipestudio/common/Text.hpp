#pragma once
/// \file Echoing untrusted text (names, CSV cells, host fields) in messages and listings:
/// control characters escaped, long input cut to an excerpt that says how long it was.

#include <cstddef>
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
