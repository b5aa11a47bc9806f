#pragma once
/// \file Numbers given on a command line (pipestudio-cli flags, pipestudio-exec options): the
/// whole text must be a number, finite (no nan, inf), and inside the flag's range; the message
/// names the flag, the text given and the range expected.

#include <cstdint>
#include <string>
#include <string_view>

#include "pipestudio/common/Expected.hpp"

namespace pipestudio {

/// (An empty `flag` leaves the prefix out, for callers that name the flag themselves.)
/// A finite decimal number in [min, max]: "--max-op-ms: 'nan' is not a finite number
/// (expected a number in [0, 1e+06])".
Expected<double> parseNumberArg(std::string_view flag, std::string_view text, double min, double max);

/// An integer in [min, max] (no fraction, no exponent, no trailing text).
Expected<std::int64_t> parseIntegerArg(std::string_view flag, std::string_view text, std::int64_t min,
                                       std::int64_t max);

/// "[1, 1024]" as the messages above write a range.
std::string rangeText(double min, double max);

}  // namespace pipestudio
