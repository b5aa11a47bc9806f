#pragma once
/// \file A validating reader over a JsonDocument that collects every problem with its
/// location, so a loader reports all mistakes of a file at once.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pipestudio/common/Json.hpp"

namespace pipestudio {

/// A value inside the document together with its JSON pointer.
struct JsonNode {
  const Json* value = nullptr;
  std::string pointer;  ///< "" is the root
  /// The member `key` / element `index`; a null node (with that pointer) when absent.
  JsonNode child(std::string_view key) const;
  JsonNode child(std::size_t index) const;
};

enum class Presence { Required, Optional };

class JsonReader {
 public:
  explicit JsonReader(const JsonDocument& doc) : m_doc(doc) {}

  JsonNode root() const { return JsonNode{&m_doc.root, ""}; }
  const JsonDocument& document() const { return m_doc; }

  /// Records "file:line:col: /pointer: message".
  void error(const JsonNode& at, const std::string& message);
  void error(const std::string& pointer, const std::string& message);
  bool ok() const { return m_errors.empty(); }
  const std::vector<std::string>& errors() const { return m_errors; }
  /// All problems, one per line.
  Error toError() const;

  bool isObject(const JsonNode& node);
  bool isArray(const JsonNode& node);

  /// The member `key` of `obj` (which must be an object), or nullopt (error if Required).
  std::optional<JsonNode> field(const JsonNode& obj, std::string_view key, Presence presence);
  std::optional<JsonNode> object(const JsonNode& obj, std::string_view key, Presence presence);
  std::optional<JsonNode> array(const JsonNode& obj, std::string_view key, Presence presence);

  std::optional<std::string> string(const JsonNode& obj, std::string_view key, Presence presence,
                                    bool allowEmpty = false);
  std::optional<bool> boolean(const JsonNode& obj, std::string_view key, Presence presence);
  /// A finite number in [min, max]; `what` describes the range in the message.
  std::optional<double> number(const JsonNode& obj, std::string_view key, Presence presence, double min, double max);
  std::optional<std::int64_t> integer(const JsonNode& obj, std::string_view key, Presence presence, std::int64_t min,
                                      std::int64_t max);
  /// Same checks applied to a node itself (for array elements).
  std::optional<std::string> stringValue(const JsonNode& node, bool allowEmpty = false);
  std::optional<double> numberValue(const JsonNode& node, double min, double max);
  std::optional<std::int64_t> integerValue(const JsonNode& node, std::int64_t min, std::int64_t max);

  /// Flags members of `obj` not in `known` (typos such as `forward_msec` are caught).
  void rejectUnknown(const JsonNode& obj, std::initializer_list<std::string_view> known);
  void rejectUnknown(const JsonNode& obj, std::span<const std::string_view> known);

  /// Checks `schema` equals `expected` ("pipestudio.model/1"); names future versions.
  bool checkSchema(const JsonNode& obj, std::string_view expected);

 private:
  const JsonDocument& m_doc;
  std::vector<std::string> m_errors;
};

/// Human name of a JSON value's type ("string", "number", "object", ...).
std::string jsonTypeName(const Json& value);
/// The same with its article ("an integer", "a string"), for messages.
std::string jsonTypeWithArticle(const Json& value);

}  // namespace pipestudio
