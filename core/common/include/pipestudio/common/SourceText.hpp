#pragma once
/// \file Untrusted text (a model's name, a file name, a flag's value) written into source code
/// that another program parses or runs: the framework exports' Python and TOML, their shell
/// argument lists, and remote command lines. One function, one rule per place in the source, so
/// no name can end its literal and become code:
///
///     out << "BASE = " << *sourceText(SourceContext::PythonString, base) << '\n';
///     out << "# " << *sourceText(SourceContext::Comment, note) << '\n';
///
/// Every form reads back as exactly the bytes given (a comment as their escaped, one-line
/// rendering), or is refused where the language cannot hold them.

#include <string>
#include <string_view>
#include <vector>

#include "pipestudio/common/Expected.hpp"

namespace pipestudio {

/// Where in a source file the text goes.
enum class SourceContext {
  /// A Python `str` literal, quotes included: ASCII only, `\"`, `\\`, `\n`, `\r`, `\t`, `\xNN`
  /// for other control characters, `\uXXXX`/`\UXXXXXXXX` for every other code point, and
  /// `\udcNN` for a byte that is not UTF-8 (Python's surrogateescape, which os.fsencode turns back
  /// into that byte, so a file name round-trips). Never refused.
  PythonString,
  /// The body of a `"""…"""` literal (a docstring): the same escapes, except that line breaks
  /// stay line breaks, printable non-ASCII text stays as it is, and a quote is escaped only
  /// before another quote or at the end (so no `"""` can form). Never refused.
  PythonDocstring,
  /// A TOML basic string, quotes included (TOML 1.0 §String): `\"`, `\\`, `\b \t \n \f \r`,
  /// `\uXXXX`/`\UXXXXXXXX` for other control characters and every non-ASCII code point. Text
  /// that is not UTF-8 is refused (a TOML document is UTF-8).
  TomlString,
  /// One word of a POSIX shell command: as it is where every byte is one of
  /// `A-Za-z0-9_@%+=:,./-` (Python's shlex.quote rule), else in single quotes with each `'`
  /// written `'\''` (POSIX.1-2017 XCU 2.2.2). A NUL byte is refused (no argv can carry it).
  ShellWord,
  /// The rest of a `#` comment line in Python, TOML or shell: one line, broken UTF-8 replaced
  /// by U+FFFD, control characters, line and paragraph separators and bidirectional controls
  /// (which can make code read differently from what runs) escaped as `\n`, `\x1b`, `\u2028`…
  /// Never refused.
  Comment,
};

/// `text` written for `context` (see SourceContext), or why it cannot be.
Expected<std::string> sourceText(SourceContext context, std::string_view text);

/// sourceText(ShellWord) that always quotes (`''` for an empty word) and drops NUL bytes: the
/// words of remote command lines, whose arguments are checked before they get here.
std::string shellQuote(std::string_view word);

/// Words joined by single spaces, each quoted with shellQuote().
std::string joinShellWords(const std::vector<std::string>& words);

}  // namespace pipestudio
