#pragma once
/// \file JSON documents that remember where they came from, so every error can say
/// `file:line:col: /json/pointer: what is wrong (expected …)`.

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "pipestudio/common/Expected.hpp"

namespace pipestudio {

using Json = nlohmann::json;

/// Limits that keep hostile input from costing unbounded time, stack or memory.
struct JsonLimits {
  std::size_t maxFileBytes = std::size_t{1} << 30;    ///< 1 GiB: a 200k-op plan is ~40 MB
  std::size_t maxDepth = 64;                          ///< our formats nest < 8 deep
  std::size_t maxStringBytes = std::size_t{1} << 20;  ///< 1 MiB: names and notes, not blobs
};

struct TextLocation {
  std::size_t line = 1;    ///< 1-based
  std::size_t column = 1;  ///< 1-based, in bytes
};

/// A parsed JSON document with its source text, for locating JSON pointers on error.
struct JsonDocument {
  std::string path;  ///< shown in messages; "<memory>" for in-memory text
  std::string text;
  Json root;

  /// Location of the value at `pointer` (RFC 6901), or of the closest existing parent.
  /// Scans the text on demand: errors are rare, documents can be large.
  TextLocation locate(std::string_view pointer) const;
  /// "file:line:col: /pointer" — the prefix of every message about this document.
  std::string where(std::string_view pointer) const;
};

/// Parses `text` under `limits`. Syntax errors and limit violations come back as
/// `path:line:col: what (expected …)`.
Expected<JsonDocument> parseJson(std::string text, std::string path, const JsonLimits& limits = {});

/// Reads and parses a file (refusing files larger than limits.maxFileBytes before reading).
Expected<JsonDocument> loadJsonFile(const std::string& path, const JsonLimits& limits = {});

/// Writes `value` to `path` atomically (temp file + rename), pretty-printed when `indent` >= 0.
Status saveJsonFile(const std::string& path, const Json& value, int indent = 2);

/// 1-based line/column of a byte offset in `text`.
TextLocation locationOfOffset(std::string_view text, std::size_t offset);

/// Escapes a key for use as a JSON pointer token (~ → ~0, / → ~1).
std::string jsonPointerEscape(std::string_view token);

}  // namespace pipestudio
