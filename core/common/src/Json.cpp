#include "pipestudio/common/Json.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "pipestudio/common/Files.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"

namespace pipestudio {
namespace {

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Iterative pre-scan: refuses nesting deeper than the limit, over-long strings and duplicate
// object keys before nlohmann builds a DOM (which would silently keep the last of two equal
// keys), so hostile input costs O(n) time and no stack. Keys are compared decoded ("a" and
// "\u0061" are one key).
struct Problem {
  std::size_t offset;
  std::string what;
};

std::string decodeKey(std::string_view t, std::size_t begin, std::size_t end);

class KeyScope {
 public:
  // Returns the offset of an earlier equal key, if any; remembers this one otherwise.
  std::optional<std::size_t> add(std::string key, std::size_t offset) {
    if (m_keys.size() < kLinear) {
      for (const auto& [k, at] : m_keys) {
        if (k == key) return at;
      }
      m_keys.emplace_back(std::move(key), offset);
      return std::nullopt;
    }
    if (m_index.empty()) {
      for (const auto& [k, at] : m_keys) m_index.emplace(k, at);
    }
    const auto [it, inserted] = m_index.emplace(std::move(key), offset);
    if (!inserted) return it->second;
    return std::nullopt;
  }

 private:
  static constexpr std::size_t kLinear = 16;  // our objects have few keys: a scan beats hashing
  std::vector<std::pair<std::string, std::size_t>> m_keys;
  std::unordered_map<std::string, std::size_t> m_index;
};

std::optional<Problem> prescan(std::string_view text, const JsonLimits& limits) {
  std::size_t depth = 0;
  bool inString = false;
  bool escape = false;
  bool hasEscape = false;
  std::size_t stringStart = 0;
  // One entry per open bracket: a key scope for objects, nullopt for arrays.
  std::vector<std::optional<KeyScope>> scopes;
  // In an object, a string is a key when it follows '{' or ','.
  bool expectKey = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      // Checked on every byte, escapes included: a string of backslashes is still a string. The
      // bytes between the quotes so far (stringStart is the opening quote): a string of exactly
      // the limit reaches its closing quote.
      if (i - stringStart - 1 > limits.maxStringBytes) {
        return Problem{stringStart, "string longer than " + std::to_string(limits.maxStringBytes) +
                                        " bytes (expected names and short text only)"};
      }
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = hasEscape = true;
      } else if (c == '"') {
        inString = false;
        if (expectKey && !scopes.empty() && scopes.back()) {
          std::string key = hasEscape ? decodeKey(text, stringStart, i + 1)
                                      : std::string(text.substr(stringStart + 1, i - stringStart - 1));
          if (auto first = scopes.back()->add(key, stringStart)) {
            const TextLocation loc = locationOfOffset(text, *first);
            return Problem{stringStart, "duplicate key '" + excerpt(key) + "' (first at line " +
                                            std::to_string(loc.line) + ", column " + std::to_string(loc.column) +
                                            "; expected each key once per object)"};
          }
        }
        expectKey = false;
      }
      continue;
    }
    if (c == '"') {
      inString = true;
      hasEscape = false;
      stringStart = i;
    } else if (c == '{' || c == '[') {
      if (++depth > limits.maxDepth) {
        return Problem{i, "nesting deeper than " + std::to_string(limits.maxDepth) + " levels (expected at most " +
                              std::to_string(limits.maxDepth) + ")"};
      }
      scopes.emplace_back(c == '{' ? std::optional<KeyScope>(KeyScope{}) : std::nullopt);
      expectKey = c == '{';
    } else if (c == '}' || c == ']') {
      if (depth > 0) --depth;
      if (!scopes.empty()) scopes.pop_back();
      expectKey = false;
    } else if (c == ',') {
      expectKey = !scopes.empty() && scopes.back().has_value();
    }
  }
  return std::nullopt;
}

// Parser messages quote the input ("last read: '…'"): keep binary garbage off the terminal.
std::string printable(std::string text) {
  for (char& c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) c = '?';
  }
  return text;
}

// Skips whitespace from `i`; returns the new index.
std::size_t skipSpace(std::string_view t, std::size_t i) {
  while (i < t.size() && isSpace(t[i])) ++i;
  return i;
}

// `i` at an opening quote; returns the index one past the closing quote.
std::size_t skipString(std::string_view t, std::size_t i) {
  ++i;
  while (i < t.size()) {
    if (t[i] == '\\') {
      i += 2;
    } else if (t[i] == '"') {
      return i + 1;
    } else {
      ++i;
    }
  }
  return t.size();
}

// `i` at the start of any value; returns one past its end (valid JSON assumed, bounded anyway).
std::size_t skipValue(std::string_view t, std::size_t i) {
  if (i >= t.size()) return i;
  if (t[i] == '"') return skipString(t, i);
  if (t[i] == '{' || t[i] == '[') {
    std::size_t depth = 0;
    while (i < t.size()) {
      const char c = t[i];
      if (c == '"') {
        i = skipString(t, i);
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') {
        if (--depth == 0) return i + 1;
      }
      ++i;
    }
    return i;
  }
  while (i < t.size() && t[i] != ',' && t[i] != '}' && t[i] != ']' && !isSpace(t[i])) ++i;
  return i;
}

std::string decodeKey(std::string_view t, std::size_t begin, std::size_t end) {
  try {
    return Json::parse(t.substr(begin, end - begin)).get<std::string>();
  } catch (...) {
    return std::string(t.substr(begin + 1, end - begin - 2));
  }
}

std::vector<std::string> splitPointer(std::string_view pointer) {
  std::vector<std::string> tokens;
  if (pointer.empty()) return tokens;
  std::size_t pos = 1;  // skip leading '/'
  while (true) {
    const std::size_t next = pointer.find('/', pos);
    std::string raw(pointer.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos));
    std::string token;
    for (std::size_t k = 0; k < raw.size(); ++k) {
      if (raw[k] == '~' && k + 1 < raw.size()) {
        token += raw[k + 1] == '1' ? '/' : '~';
        ++k;
      } else {
        token += raw[k];
      }
    }
    tokens.push_back(std::move(token));
    if (next == std::string_view::npos) break;
    pos = next + 1;
  }
  return tokens;
}

// Follows `tokens` through the text; returns the offset of the deepest value reached.
std::size_t findOffset(std::string_view t, const std::vector<std::string>& tokens) {
  std::size_t i = skipSpace(t, 0);
  std::size_t best = i;
  for (const std::string& token : tokens) {
    if (i >= t.size()) return best;
    if (t[i] == '{') {
      i = skipSpace(t, i + 1);
      bool found = false;
      while (i < t.size() && t[i] == '"') {
        const std::size_t keyEnd = skipString(t, i);
        const std::string key = decodeKey(t, i, keyEnd);
        std::size_t v = skipSpace(t, keyEnd);
        if (v < t.size() && t[v] == ':') v = skipSpace(t, v + 1);
        if (key == token) {
          i = v;
          found = true;
          break;
        }
        i = skipSpace(t, skipValue(t, v));
        if (i < t.size() && t[i] == ',') i = skipSpace(t, i + 1);
      }
      if (!found) return best;
    } else if (t[i] == '[') {
      std::size_t index = 0;
      try {
        index = std::stoul(token);
      } catch (...) {
        return best;
      }
      i = skipSpace(t, i + 1);
      for (std::size_t k = 0; k < index && i < t.size() && t[i] != ']'; ++k) {
        i = skipSpace(t, skipValue(t, i));
        if (i < t.size() && t[i] == ',') i = skipSpace(t, i + 1);
      }
      if (i >= t.size() || t[i] == ']') return best;
    } else {
      return best;
    }
    best = i;
  }
  return best;
}

}  // namespace

TextLocation locationOfOffset(std::string_view text, std::size_t offset) {
  TextLocation loc;
  const std::size_t end = std::min(offset, text.size());
  std::size_t lineStart = 0;
  for (std::size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++loc.line;
      lineStart = i + 1;
    }
  }
  loc.column = end - lineStart + 1;
  return loc;
}

std::string jsonPointerEscape(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (const char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

TextLocation JsonDocument::locate(std::string_view pointer) const {
  return locationOfOffset(text, findOffset(text, splitPointer(pointer)));
}

std::string JsonDocument::where(std::string_view pointer) const {
  const TextLocation loc = locate(pointer);
  std::ostringstream out;
  out << path << ':' << loc.line << ':' << loc.column << ": " << (pointer.empty() ? "/" : pointer);
  return out.str();
}

Expected<JsonDocument> parseJson(std::string text, std::string path, const JsonLimits& limits) {
  if (text.size() > limits.maxFileBytes) {
    return Error{path + ":1:1: file is " + std::to_string(text.size()) + " bytes (expected at most " +
                 std::to_string(limits.maxFileBytes) + ")"};
  }
  std::size_t first = skipSpace(text, 0);
  if (first >= text.size()) {
    return Error{path + ":1:1: file is empty (expected a JSON object)"};
  }
  if (auto problem = prescan(text, limits)) {
    const TextLocation loc = locationOfOffset(text, problem->offset);
    return Error{path + ":" + std::to_string(loc.line) + ":" + std::to_string(loc.column) + ": " + problem->what};
  }
  JsonDocument doc;
  try {
    doc.root = Json::parse(text);
  } catch (const Json::parse_error& e) {
    // e.byte is 1-based and points just past the offending character.
    const std::size_t offset = e.byte > 0 ? e.byte - 1 : 0;
    const TextLocation loc = locationOfOffset(text, offset);
    std::string what = e.what();
    // nlohmann's text: "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error ..."
    if (const auto colon = what.find(": ", what.find("column")); colon != std::string::npos) {
      what = what.substr(colon + 2);
    }
    if (offset + 1 >= text.size()) {
      what = "truncated JSON: " + what + " (expected the rest of the document)";
    } else {
      what += " (expected valid JSON)";
    }
    return Error{path + ":" + std::to_string(loc.line) + ":" + std::to_string(loc.column) + ": " + printable(what)};
  } catch (const Json::out_of_range& e) {
    // nlohmann reports number overflow ("1e999") without a position: find the literal.
    std::string what = e.what();
    const auto quote = what.find("parsing '");
    std::size_t offset = 0;
    if (quote != std::string::npos) {
      const std::string literal = what.substr(quote + 9, what.rfind('\'') - quote - 9);
      what = "number " + literal + " is out of range";
      if (const auto at = text.find(literal); at != std::string::npos) offset = at;
    }
    const TextLocation loc = locationOfOffset(text, offset);
    return Error{path + ":" + std::to_string(loc.line) + ":" + std::to_string(loc.column) + ": " + printable(what) +
                 " (expected a finite number)"};
  } catch (const std::exception& e) {
    return Error{path + ":1:1: " + printable(e.what()) + " (expected valid JSON)"};
  }
  doc.path = std::move(path);
  doc.text = std::move(text);
  return doc;
}

Expected<JsonDocument> loadJsonFile(const std::string& path, const JsonLimits& limits) {
  // Regular files only (a FIFO would hang the read), UTF-8 only (UTF-16 is named as such).
  PS_ASSIGN_OR_RETURN(auto text, readTextFile(path, limits.maxFileBytes));
  return parseJson(std::move(text), path, limits);
}

Status saveJsonFile(const std::string& path, const Json& value, int indent) {
  return writeOutputFile(path, [&](std::ostream& out, std::string&) {
    out << value.dump(indent < 0 ? -1 : indent, ' ', false, Json::error_handler_t::replace) << '\n';
    return static_cast<bool>(out);
  });
}

}  // namespace pipestudio
