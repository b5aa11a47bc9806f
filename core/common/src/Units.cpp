#include "pipestudio/common/Units.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "pipestudio/common/Text.hpp"

namespace pipestudio {

Expected<std::int64_t> parseBytes(std::string_view text) {
  std::string s(text);
  std::size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(s, &pos);
  } catch (...) {
    return Error{"'" + excerpt(s) + "' is not a size (expected a number of bytes or e.g. 40GiB, 512MiB, 80GB)"};
  }
  while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
  std::string unit = s.substr(pos);
  double scale = 1;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "KiB")
    scale = 1024.0;
  else if (unit == "MiB")
    scale = 1024.0 * 1024;
  else if (unit == "GiB")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "TiB")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB" || unit == "kB")
    scale = 1e3;
  else if (unit == "MB")
    scale = 1e6;
  else if (unit == "GB")
    scale = 1e9;
  else if (unit == "TB")
    scale = 1e12;
  else
    return Error{"'" + excerpt(s) + "' has an unknown unit '" + excerpt(unit) +
                 "' (expected B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)"};
  const auto outOfRange = [&] {
    return Error{"'" + excerpt(s) + "' is out of range (expected 0 to " +
                 std::to_string(std::numeric_limits<std::int64_t>::max()) + " bytes, just under 8 EiB)"};
  };
  // A plain count of bytes is read exactly: every int64 is a size, up to 2^63 − 1 (a double
  // would round it up past the largest).
  const std::string_view digits = std::string_view(s).substr(0, s.find_first_not_of("0123456789"));
  if (scale == 1 && !digits.empty() && s.find_first_of(".eE") == std::string::npos) {
    std::int64_t exact = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), exact);
    if (ec == std::errc::result_out_of_range) return outOfRange();
    if (ec == std::errc() && end == digits.data() + digits.size()) return exact;
  }
  const double bytes = value * scale;
  // 2^63 is the first double past the int64 range.
  if (!std::isfinite(bytes) || bytes < 0 || bytes >= 9223372036854775808.0) return outOfRange();
  return static_cast<std::int64_t>(std::llround(bytes));
}

std::string formatBytes(double bytes) {
  constexpr std::array<const char*, 5> kUnits{"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = bytes;
  while (std::abs(v) >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::array<char, 64> buf{};
  std::snprintf(buf.data(), buf.size(), u == 0 ? "%.0f %s" : "%.2f %s", v, kUnits[static_cast<std::size_t>(u)]);
  return buf.data();
}

std::string formatMs(double ms) {
  std::array<char, 64> buf{};
  if (std::abs(ms) < 1.0)
    std::snprintf(buf.data(), buf.size(), "%.1f µs", ms * 1000);
  else if (std::abs(ms) < 1000.0)
    std::snprintf(buf.data(), buf.size(), "%.2f ms", ms);
  else
    std::snprintf(buf.data(), buf.size(), "%.2f s", ms / 1000);
  return buf.data();
}

}  // namespace pipestudio
