#include "pipestudio/common/Json.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

namespace pipestudio {
namespace {

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Iterative pre-scan: refuses nesting deeper than the limit and over-long strings before
// nlohmann builds a DOM, so hostile input costs O(n) time and no stack.
std::optional<std::pair<std::size_t, std::string>> prescan(std::string_view text, const JsonLimits& limits) {
  std::size_t depth = 0;
  bool inString = false;
  bool escape = false;
  std::size_t stringStart = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      // Checked on every byte, escapes included: a string of backslashes is still a string.
      if (i - stringStart > limits.maxStringBytes) {
        return std::pair{stringStart, "string longer than " + std::to_string(limits.maxStringBytes) +
                                          " bytes (expected names and short text only)"};
      }
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        inString = false;
      }
      continue;
    }
    if (c == '"') {
      inString = true;
      stringStart = i;
    } else if (c == '{' || c == '[') {
      if (++depth > limits.maxDepth) {
        return std::pair{i, "nesting deeper than " + std::to_string(limits.maxDepth) + " levels (expected at most " +
                                std::to_string(limits.maxDepth) + ")"};
      }
    } else if (c == '}' || c == ']') {
      if (depth > 0) --depth;
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
    const TextLocation loc = locationOfOffset(text, problem->first);
    return Error{path + ":" + std::to_string(loc.line) + ":" + std::to_string(loc.column) + ": " + problem->second};
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
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return Error{path + ": cannot open: no such file (expected an existing JSON file)"};
  }
  if (std::filesystem::is_directory(status)) {
    return Error{path + ": is a directory (expected a JSON file)"};
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Error{path + ": cannot open for reading"};
  }
  in.seekg(0, std::ios::end);
  const auto size = in.tellg();
  if (size < 0) {
    return Error{path + ": cannot determine file size"};
  }
  if (static_cast<std::size_t>(size) > limits.maxFileBytes) {
    return Error{path + ":1:1: file is " + std::to_string(static_cast<long long>(size)) + " bytes (expected at most " +
                 std::to_string(limits.maxFileBytes) + ")"};
  }
  in.seekg(0);
  std::string text(static_cast<std::size_t>(size), '\0');
  in.read(text.data(), size);
  if (!in) {
    return Error{path + ": read error"};
  }
  return parseJson(std::move(text), path, limits);
}

Status saveJsonFile(const std::string& path, const Json& value, int indent) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Error{path + ": cannot open for writing"};
    out << value.dump(indent < 0 ? -1 : indent, ' ', false, Json::error_handler_t::replace) << '\n';
    if (!out) return Error{path + ": write error"};
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return Error{path + ": cannot replace file: " + ec.message()};
  }
  return {};
}

}  // namespace pipestudio
