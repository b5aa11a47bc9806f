#pragma once
// Checks every numeric flag and output path of pipestudio-cli (issue 14): a number must be
// finite and in range (nan, inf, 0 where 1 is the least, -5 … are refused, never replaced by a
// default), and the message names the flag. Usage, for any new option:
//   cmd->add_option("--tp", o.tp, "Tensor parallel degree")->check(intIn(1, 1024));
//   cmd->add_option("--max-op-ms", o.maxOpMs, "...")->check(numberIn(0, 1e6));
//   cmd->add_option("-o,--output", o.output, "...")->check(nonEmptyPath());
//   cmd->add_option("--memory-limit", o.memoryLimit, "...")->check(byteSize());
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "pipestudio/common/NumberArg.hpp"
#include "pipestudio/common/Units.hpp"

namespace pipestudio::cli {

/// An integer in [min, max]; CLI11 prefixes the message with the flag's name.
inline CLI::Validator intIn(std::int64_t min, std::int64_t max) {
  return {[min, max](std::string& text) {
            auto v = parseIntegerArg("", text, min, max);
            return v ? std::string() : v.message();
          },
          "INT in [" + std::to_string(min) + ", " + std::to_string(max) + "]", "intIn"};
}

/// A finite number in [min, max] (nan and inf are refused).
inline CLI::Validator numberIn(double min, double max) {
  return {[min, max](std::string& text) {
            auto v = parseNumberArg("", text, min, max);
            return v ? std::string() : v.message();
          },
          "NUMBER in " + rangeText(min, max), "numberIn"};
}

/// A positive size in bytes, e.g. 40GiB or 42949672960 (`--memory-limit ''` is a mistake, not
/// "no limit").
inline CLI::Validator byteSize() {
  return {[](std::string& text) {
            auto bytes = parseBytes(text);
            if (!bytes) return bytes.message();
            return *bytes > 0 ? std::string() : "'" + text + "' is not a positive size (expected e.g. 40GiB)";
          },
          "BYTES", "byteSize"};
}

/// A value that must be given when the flag is (`--recompute-modules ''` is a mistake, not the
/// default the flag's absence means).
inline CLI::Validator nonEmptyValue() {
  return {[](std::string& text) {
            return text.empty() ? std::string("empty value (expected one; leave the flag out for the default)")
                                : std::string();
          },
          "TEXT", "nonEmptyValue"};
}

/// A file name (output, database): not empty (`-o ''` is a mistake, not "no output").
inline CLI::Validator nonEmptyPath() {
  return {
      [](std::string& text) { return text.empty() ? std::string("empty file name (expected a path)") : std::string(); },
      "FILE", "nonEmptyPath"};
}

}  // namespace pipestudio::cli
