#include "pipestudio/common/NumberArg.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "pipestudio/common/Text.hpp"

namespace pipestudio {
namespace {
// An empty flag leaves the naming to the caller (CLI11 puts the option's name in front).
std::string prefix(std::string_view flag) { return flag.empty() ? std::string() : std::string(flag) + ": "; }
}  // namespace

std::string rangeText(double min, double max) {
  std::ostringstream out;
  out << '[' << min << ", " << max << ']';
  return out.str();
}

Expected<double> parseNumberArg(std::string_view flag, std::string_view text, double min, double max) {
  const std::string given(text);
  const std::string expected = " (expected a number in " + rangeText(min, max) + ")";
  char* end = nullptr;
  errno = 0;
  const double v = given.empty() ? 0.0 : std::strtod(given.c_str(), &end);
  if (given.empty() || end != given.c_str() + given.size()) {
    return Error{prefix(flag) + "'" + excerpt(given) + "' is not a number" + expected};
  }
  if (!std::isfinite(v) || errno == ERANGE) {
    if (std::isfinite(v) && std::fabs(v) < 1.0) {
      errno = 0;  // underflow to (almost) zero: a number, judged by the range below
    } else {
      return Error{prefix(flag) + "'" + excerpt(given) + "' is not a finite number" + expected};
    }
  }
  if (v < min || v > max) return Error{prefix(flag) + excerpt(given) + " is out of range" + expected};
  return v;
}

Expected<std::int64_t> parseIntegerArg(std::string_view flag, std::string_view text, std::int64_t min,
                                       std::int64_t max) {
  const std::string expected = " (expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "])";
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  std::int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ptr != digits.data() + digits.size()) {
    return Error{prefix(flag) + "'" + excerpt(text) + "' is not an integer" + expected};
  }
  if (ec == std::errc::result_out_of_range || v < min || v > max) {
    return Error{prefix(flag) + excerpt(text) + " is out of range" + expected};
  }
  return v;
}

}  // namespace pipestudio
