#include "pipestudio/common/JsonReader.hpp"

#include <cmath>
#include <sstream>

#include "pipestudio/common/Text.hpp"

namespace pipestudio {

std::string jsonTypeName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "object";
    case Json::value_t::array:
      return "array";
    case Json::value_t::string:
      return "string";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer";
    case Json::value_t::number_float:
      return "number";
    case Json::value_t::binary:
      return "binary";
    case Json::value_t::discarded:
      return "discarded";
  }
  return "unknown";
}

std::string jsonTypeWithArticle(const Json& value) {
  const std::string name = jsonTypeName(value);
  const bool vowel = !name.empty() && std::string_view("aeiou").find(name.front()) != std::string_view::npos;
  return (vowel ? "an " : "a ") + name;
}

// A child that does not exist is a null node with the right pointer (never a throw): error
// paths often name a member that may be absent, and the fuzzer found one that was.
const Json& missingValue() {
  static const Json kNull;
  return kNull;
}

JsonNode JsonNode::child(std::string_view key) const {
  const Json* found = &missingValue();
  if (value->is_object()) {
    if (const auto it = value->find(std::string(key)); it != value->end()) found = &*it;
  }
  return JsonNode{found, pointer + "/" + jsonPointerEscape(key)};
}

JsonNode JsonNode::child(std::size_t index) const {
  const Json* found = value->is_array() && index < value->size() ? &(*value)[index] : &missingValue();
  return JsonNode{found, pointer + "/" + std::to_string(index)};
}

void JsonReader::error(const JsonNode& at, const std::string& message) { error(at.pointer, message); }

void JsonReader::error(const std::string& pointer, const std::string& message) {
  // Bounded: a hostile file with a million bad entries still yields a readable report.
  constexpr std::size_t kMaxErrors = 100;
  if (m_errors.size() == kMaxErrors) {
    m_errors.push_back(m_doc.path + ": too many errors, stopping after " + std::to_string(kMaxErrors));
  }
  if (m_errors.size() > kMaxErrors) return;
  m_errors.push_back(m_doc.where(pointer) + ": " + message);
}

Error JsonReader::toError() const {
  std::ostringstream out;
  for (std::size_t i = 0; i < m_errors.size(); ++i) {
    if (i) out << '\n';
    out << m_errors[i];
  }
  return Error{out.str()};
}

bool JsonReader::isObject(const JsonNode& node) {
  if (node.value->is_object()) return true;
  error(node, "is " + jsonTypeWithArticle(*node.value) + " (expected an object)");
  return false;
}

bool JsonReader::isArray(const JsonNode& node) {
  if (node.value->is_array()) return true;
  error(node, "is " + jsonTypeWithArticle(*node.value) + " (expected an array)");
  return false;
}

std::optional<JsonNode> JsonReader::field(const JsonNode& obj, std::string_view key, Presence presence) {
  if (!obj.value->is_object()) return std::nullopt;
  const auto it = obj.value->find(std::string(key));
  if (it == obj.value->end()) {
    if (presence == Presence::Required)
      error(obj, "missing required field '" + std::string(key) + "' (expected it in this object)");
    return std::nullopt;
  }
  return obj.child(key);
}

std::optional<JsonNode> JsonReader::object(const JsonNode& obj, std::string_view key, Presence presence) {
  auto node = field(obj, key, presence);
  if (!node || !isObject(*node)) return std::nullopt;
  return node;
}

std::optional<JsonNode> JsonReader::array(const JsonNode& obj, std::string_view key, Presence presence) {
  auto node = field(obj, key, presence);
  if (!node || !isArray(*node)) return std::nullopt;
  return node;
}

std::optional<std::string> JsonReader::stringValue(const JsonNode& node, bool allowEmpty) {
  if (!node.value->is_string()) {
    error(node, "is " + jsonTypeWithArticle(*node.value) + " (expected a string)");
    return std::nullopt;
  }
  std::string s = node.value->get<std::string>();
  if (!allowEmpty && s.empty()) {
    error(node, "is empty (expected a non-empty string)");
    return std::nullopt;
  }
  return s;
}

std::optional<double> JsonReader::numberValue(const JsonNode& node, double min, double max) {
  if (!node.value->is_number()) {
    error(node, "is " + jsonTypeWithArticle(*node.value) + " (expected a number)");
    return std::nullopt;
  }
  const double v = node.value->get<double>();
  if (!std::isfinite(v)) {
    error(node, "is not finite (expected a finite number)");
    return std::nullopt;
  }
  if (v < min || v > max) {
    std::ostringstream msg;
    msg << "is " << v << " (expected a number in [" << min << ", " << max << "])";
    error(node, msg.str());
    return std::nullopt;
  }
  return v;
}

std::optional<std::int64_t> JsonReader::integerValue(const JsonNode& node, std::int64_t min, std::int64_t max) {
  const Json& v = *node.value;
  std::int64_t value = 0;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(max)) {
      error(node, "is " + std::to_string(u) + " (expected an integer in [" + std::to_string(min) + ", " +
                      std::to_string(max) + "])");
      return std::nullopt;
    }
    value = static_cast<std::int64_t>(u);
  } else if (v.is_number_integer()) {
    value = v.get<std::int64_t>();
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()) &&
             std::abs(v.get<double>()) < 9.0e15) {
    value = static_cast<std::int64_t>(v.get<double>());
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>())) {
    std::ostringstream msg;
    msg << "is " << v.get<double>() << " (expected an integer in [" << min << ", " << max << "])";
    error(node, msg.str());
    return std::nullopt;
  } else if (v.is_number_float() && !std::isfinite(v.get<double>())) {
    // dump() would print a non-finite number as "null".
    error(node, "is not finite (expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "])");
    return std::nullopt;
  } else {
    error(node,
          "is " + jsonTypeWithArticle(v) + (v.is_number() ? " " + v.dump() : std::string()) + " (expected an integer)");
    return std::nullopt;
  }
  if (value < min || value > max) {
    error(node, "is " + std::to_string(value) + " (expected an integer in [" + std::to_string(min) + ", " +
                    std::to_string(max) + "])");
    return std::nullopt;
  }
  return value;
}

std::optional<std::string> JsonReader::string(const JsonNode& obj, std::string_view key, Presence presence,
                                              bool allowEmpty) {
  auto node = field(obj, key, presence);
  if (!node) return std::nullopt;
  return stringValue(*node, allowEmpty);
}

std::optional<bool> JsonReader::boolean(const JsonNode& obj, std::string_view key, Presence presence) {
  auto node = field(obj, key, presence);
  if (!node) return std::nullopt;
  if (!node->value->is_boolean()) {
    error(*node, "is " + jsonTypeWithArticle(*node->value) + " (expected true or false)");
    return std::nullopt;
  }
  return node->value->get<bool>();
}

std::optional<double> JsonReader::number(const JsonNode& obj, std::string_view key, Presence presence, double min,
                                         double max) {
  auto node = field(obj, key, presence);
  if (!node) return std::nullopt;
  return numberValue(*node, min, max);
}

std::optional<std::int64_t> JsonReader::integer(const JsonNode& obj, std::string_view key, Presence presence,
                                                std::int64_t min, std::int64_t max) {
  auto node = field(obj, key, presence);
  if (!node) return std::nullopt;
  return integerValue(*node, min, max);
}

void JsonReader::rejectUnknown(const JsonNode& obj, std::initializer_list<std::string_view> known) {
  rejectUnknown(obj, std::span<const std::string_view>(known.begin(), known.size()));
}

void JsonReader::rejectUnknown(const JsonNode& obj, std::span<const std::string_view> known) {
  if (!obj.value->is_object()) return;
  for (const auto& [key, value] : obj.value->items()) {
    bool found = false;
    for (const auto k : known) found = found || k == key;
    if (!found) {
      std::string expected;
      for (const auto k : known) expected += (expected.empty() ? "" : ", ") + std::string(k);
      error(obj.child(key), "unknown field '" + excerpt(key) + "' (expected one of: " + expected + ")");
    }
  }
}

namespace {
// "pipestudio.cluster/1" → "a cluster description"; empty for other schemas.
std::string describeSchema(std::string_view schema) {
  for (const char* kind : {"model", "cluster", "plan", "hosts", "workspace"}) {
    const std::string family = std::string("pipestudio.") + kind + "/";
    if (schema.rfind(family, 0) == 0) {
      return std::string(kind == std::string_view("hosts") ? "a hosts file"
                                                           : "a " + std::string(kind) + " description");
    }
  }
  return {};
}
}  // namespace

bool JsonReader::checkSchema(const JsonNode& obj, std::string_view expected) {
  auto node = field(obj, "schema", Presence::Required);
  if (!node) return false;
  if (!node->value->is_string()) {
    error(*node, "is " + jsonTypeWithArticle(*node->value) + " (expected the string '" + std::string(expected) + "')");
    return false;
  }
  const std::string schema = node->value->get<std::string>();
  if (schema == expected) return true;
  const auto slash = expected.rfind('/');
  const std::string family(expected.substr(0, slash + 1));
  const std::string mine = describeSchema(expected);
  const std::string theirs = describeSchema(schema);
  if (schema.rfind(family, 0) == 0) {
    error(*node, "schema '" + excerpt(schema) + "' is a version this PipeStudio does not know (expected '" +
                     std::string(expected) + "'; a newer PipeStudio may read it)");
  } else if (!theirs.empty()) {
    // Swapped files (--model given a cluster): say what the file is first.
    error(*node, "this is " + theirs + " (schema '" + excerpt(schema) + "'), expected " + mine + " ('" +
                     std::string(expected) + "')");
  } else {
    error(*node, "schema '" + excerpt(schema) + "' is not a " + family.substr(0, family.size() - 1) +
                     " document (expected '" + std::string(expected) + "')");
  }
  return false;
}

}  // namespace pipestudio
