#pragma once
/// \file POSIX shell quoting for remote command lines: nothing in a plan name, a directory
/// or an argument can break out of its word (no injection through `$`, backticks, quotes,
/// semicolons or newlines). The rule lives with every other escape of text written into source
/// code, in pipestudio/common/SourceText.hpp.

#include "pipestudio/common/SourceText.hpp"

namespace pipestudio::remote {

using ::pipestudio::joinShellWords;
using ::pipestudio::shellQuote;

}  // namespace pipestudio::remote
