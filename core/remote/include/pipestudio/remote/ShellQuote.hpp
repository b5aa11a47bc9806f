#pragma once
/// \file POSIX shell quoting for remote command lines: nothing in a plan name, a directory
/// or an argument can break out of its word (no injection through `$`, backticks, quotes,
/// semicolons or newlines).

#include <string>
#include <string_view>
#include <vector>

namespace pipestudio::remote {

/// One word for a POSIX shell (sh, bash, dash, zsh): wrapped in single quotes, each embedded
/// single quote written as '\'' (POSIX.1-2017 XCU 2.2.2: inside single quotes no character is
/// special). Empty input gives ''. A NUL byte cannot be passed in argv and is rejected by
/// joinShellWords' callers; here it is dropped.
std::string shellQuote(std::string_view word);

/// Words joined by single spaces, each quoted with shellQuote().
std::string joinShellWords(const std::vector<std::string>& words);

}  // namespace pipestudio::remote
