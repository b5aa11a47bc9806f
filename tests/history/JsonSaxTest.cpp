// The Chrome import's streaming JSON parser (core/history/src/JsonSax.hpp) against
// nlohmann::json as the reference: the same documents accepted, the same values read, the same
// documents refused, whatever the read size (tiny buffers make every token cross a refill).

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "JsonSax.hpp"

using pipestudio::history::detail::JsonFileReader;
using pipestudio::history::detail::JsonSaxParser;
using Json = nlohmann::json;

namespace {

// Rebuilds the document from the SAX events.
class DomBuilder {
 public:
  bool null() { return put(nullptr); }
  bool boolean(bool v) { return put(v); }
  bool number_integer(std::int64_t v, std::string_view) { return put(v); }
  bool number_unsigned(std::uint64_t v, std::string_view) { return put(v); }
  bool number_float(double v, std::string_view) { return put(v); }
  bool string(std::string& v) { return put(v); }
  bool key(std::string& k) {
    m_key = k;
    return true;
  }
  bool start_object() { return open(Json::object()); }
  bool start_array() { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool parse_error(std::uint64_t offset, const std::string& what) {
    errorOffset = offset;
    error = what;
    return false;
  }

  Json root;
  std::uint64_t errorOffset = 0;
  std::string error;

 private:
  bool put(Json v) {
    if (m_stack.empty()) {
      root = std::move(v);
    } else if (m_stack.back()->is_object()) {
      (*m_stack.back())[m_key] = std::move(v);
    } else {
      m_stack.back()->push_back(std::move(v));
    }
    return true;
  }
  bool open(Json v) {
    Json* slot;
    if (m_stack.empty()) {
      root = std::move(v);
      slot = &root;
    } else if (m_stack.back()->is_object()) {
      slot = &((*m_stack.back())[m_key] = std::move(v));
    } else {
      m_stack.back()->push_back(std::move(v));
      slot = &m_stack.back()->back();
    }
    m_stack.push_back(slot);
    return true;
  }
  bool close() {
    m_stack.pop_back();
    return true;
  }
  std::vector<Json*> m_stack;
  std::string m_key;
};

struct Outcome {
  bool ok = false;
  Json value;
  std::uint64_t errorOffset = 0;
  std::string error;
};

// Parses `text` strictly (only whitespace may follow the value, as nlohmann::json::parse wants).
Outcome parseOurs(const std::string& text, std::size_t bufferBytes) {
  std::FILE* f = std::tmpfile();
  if (!text.empty()) std::fwrite(text.data(), 1, text.size(), f);
  std::rewind(f);
  JsonFileReader in(f, bufferBytes);
  DomBuilder dom;
  Outcome out;
  out.ok = JsonSaxParser<DomBuilder>(in, dom).parse();
  out.errorOffset = dom.errorOffset;
  out.error = dom.error;
  if (out.ok) {
    for (int c = in.get(); c >= 0; c = in.get()) {
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') {
        out.ok = false;
        out.error = "bytes after the value";  // the import ignores them (nlohmann strict = false)
        out.errorOffset = in.offset();
        break;
      }
    }
  }
  std::fclose(f);
  out.value = std::move(dom.root);
  return out;
}

void expectSameAsNlohmann(const std::string& text, const std::string& label) {
  const Json reference = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  const bool refOk = !reference.is_discarded();
  for (std::size_t buffer :
       {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{7}, std::size_t{64}, std::size_t{1} << 20}) {
    const Outcome ours = parseOurs(text, buffer);
    ASSERT_EQ(ours.ok, refOk) << label << " (buffer " << buffer << "): " << (ours.ok ? "accepted" : ours.error)
                              << "\n  text: " << text.substr(0, 200);
    if (refOk) {
      EXPECT_EQ(ours.value, reference) << label << " (buffer " << buffer << ")";
    } else {
      EXPECT_FALSE(ours.error.empty()) << label;
      EXPECT_LE(ours.errorOffset, text.size()) << label;
    }
  }
}

const char* const kValid[] = {
    R"({"traceEvents": [{"ph": "X", "name": "k", "ts": 1.5, "dur": 2, "args": {"a": [1, -2, 3.25e-3, true, false, null]}}]})",
    R"([])",
    R"({})",
    R"( [ { } , [ ] , "" ] )",
    "\t\r\n 42 \n",
    "-0",
    "0",
    "0.0",
    "-0.0e+0",
    "1E5",
    "1e-5",
    "123456789012345678",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "-9223372036854775809",
    "1e-400",
    "2.2250738585072014e-308",
    "4.9e-324",
    "1.7976931348623157e308",
    R"("plain")",
    R"("esc \" \\ \/ \b \f \n \r \t")",
    R"("\u0000 nul")",
    R"("\u00e9\u20AC\uD83D\uDE00")",
    "\"\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xed\x9f\xbf \xee\x80\x80 \xf4\x8f\xbf\xbf\"",
    "\xEF\xBB\xBF{\"bom\": 1}",
    R"({"dup": 1, "dup": 2})",
    R"({"a": {"b": {"c": [[[[]]]]}}})",
    R"(["a", "b", {"c": "d"}, 1, 2.5, -3])",
};

const char* const kInvalid[] = {
    "",
    " ",
    "[",
    "]",
    "{",
    "[1,]",
    "[,1]",
    "[1 2]",
    R"({"a"})",
    R"({"a":})",
    R"({"a" 1})",
    R"({"a":1,})",
    "{1: 2}",
    "{'a': 1}",
    "01",
    "-01",
    "1.",
    ".5",
    "-",
    "+1",
    "1e",
    "1e+",
    "0x10",
    "1e400",
    "-1e400",
    "tru",
    "nul",
    "nulls",
    "True",
    "[true false]",
    "\"open",
    "\"\x01\"",
    "\"tab\there\"",
    R"("\x")",
    R"("\u12")",
    R"("\u12G4")",
    R"("\uD800")",
    R"("\uD800\u0041")",
    R"("\uDC00")",
    "\"\xc0\x80\"",
    "\"\xc1\xbf\"",
    "\"\xe0\x80\x80\"",
    "\"\xed\xa0\x80\"",
    "\"\xf0\x80\x80\x80\"",
    "\"\xf4\x90\x80\x80\"",
    "\"\xf5\x80\x80\x80\"",
    "\"\xff\"",
    "\"\x80\"",
    "\"\xc3\"",
    "\"\xe2\x82\"",
    "[1]]",
    "{} {}",
    "\xEF\xBB",
    "NaN",
    "Infinity",
    "[1, 2",
    R"({"a": [1, {"b": )",
};

}  // namespace

TEST(JsonSax, AcceptsWhatNlohmannAcceptsWithTheSameValues) {
  for (const char* text : kValid) expectSameAsNlohmann(text, "valid");
}

TEST(JsonSax, RefusesWhatNlohmannRefuses) {
  for (const char* text : kInvalid) expectSameAsNlohmann(text, "invalid");
}

TEST(JsonSax, ErrorOffsetsCountTheBytesReadUpToTheOffendingOne) {
  EXPECT_EQ(parseOurs("\x01 not json", 1 << 20).errorOffset, 1u);
  EXPECT_EQ(parseOurs(R"({"a": [1, 2)", 4).errorOffset, 11u);  // premature end: the size
  EXPECT_EQ(parseOurs(R"([1, 2 x])", 3).errorOffset, 7u);      // the 'x'
  const Outcome cut = parseOurs(R"({"name": "unterminated)", 5);
  EXPECT_EQ(cut.errorOffset, 22u);
  EXPECT_NE(cut.error.find("end of input"), std::string::npos) << cut.error;
}

TEST(JsonSax, DeepNestingIsBoundedNotACrash) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  const Outcome o = parseOurs(deep, 1 << 16);
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.error.find("nesting deeper"), std::string::npos) << o.error;
  expectSameAsNlohmann(std::string(5000, '[') + std::string(5000, ']'), "nested 5000");
}

// Random mutations of a Kineto-like document: byte changes, insertions, deletions and cuts.
TEST(JsonSax, MutatedTracesAgreeWithNlohmann) {
  const std::string base =
      R"({"schemaVersion": 1, "traceEvents": [)"
      R"({"ph": "X", "cat": "kernel", "name": "sm90_gemm \u00e9", "pid": 0, "tid": 7, "ts": 1700000000000.5, "dur": 2.75,)"
      R"( "args": {"stream": 7, "correlation": 18446744073709551615, "grid": [132, 1, 1], "note": "a\"b\\c\n"}},)"
      R"({"ph": "B", "name": "outer", "pid": 1, "tid": 1, "ts": -1e3}, {"ph": "E", "pid": 1, "tid": 1, "ts": 0},)"
      "{\"ph\": \"X\", \"name\": \"\xe2\x82\xac\xf0\x9f\x98\x80\", \"ts\": 0, \"dur\": 0, \"args\": {\"x\": null, "
      "\"y\": [true, false]}}"
      R"(]})";
  ASSERT_FALSE(Json::parse(base, nullptr, false).is_discarded());
  std::mt19937 rng(20260611);
  const std::string alphabet = "{}[]\",:\\/ -+.0123456789eEtrufalsn\x01\x7f\x80\xbf\xc3\xed\xf0\xff";
  for (int i = 0; i < 3000; ++i) {
    std::string text = base;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const std::size_t at = rng() % text.size();
      switch (rng() % 4) {
        case 0:
          text[at] = alphabet[rng() % alphabet.size()];
          break;
        case 1:
          text.insert(at, 1, alphabet[rng() % alphabet.size()]);
          break;
        case 2:
          text.erase(at, 1 + rng() % 4);
          break;
        default:
          text.resize(at);
          break;
      }
    }
    const Json reference = Json::parse(text, nullptr, false);
    const Outcome ours = parseOurs(text, 1 + rng() % 13);
    ASSERT_EQ(ours.ok, !reference.is_discarded()) << "mutation " << i << ": " << ours.error << "\n  text: " << text;
    if (ours.ok) {
      EXPECT_EQ(ours.value, reference) << "mutation " << i;
    }
  }
}
