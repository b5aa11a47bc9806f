#pragma once
// A streaming JSON (RFC 8259) SAX parser over a FILE*, for the Chrome trace import.
//
// Why not nlohmann::json::sax_parse, which the import used before: its lexer does per-byte
// bookkeeping (position counters, a copy of every byte into the token text, a switch per
// string byte) that made it half of the import profile. This parser scans runs of plain
// string bytes at once and keeps one number's text only; it reads the file in 1 MiB chunks
// and holds one string at a time plus one byte per open container, so memory stays bounded
// whatever the file size. It accepts exactly RFC 8259 JSON (UTF-8 validated as RFC 3629,
// surrogate pairs checked), like nlohmann, and stops after the first complete value
// (trailing bytes are not read, like sax_parse with strict = false).
//
// Every string and key is bounded by kMaxTraceStringBytes: reading stops there (a gzip bomb
// of one 3 GB string costs 1 MiB), and refused() tells such a refusal from a file cut short.
//
// Handler interface: null(), boolean(bool), number_integer(int64, text),
// number_unsigned(uint64, text), number_float(double, text), string(std::string&),
// key(std::string&), start_object(), end_object(), start_array(), end_array() — each
// returning false to stop — and parse_error(offset, message), where offset counts the bytes
// read up to and including the offending one (the file size at a premature end).

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipestudio/common/Files.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/history/TraceImport.hpp"

namespace pipestudio::history::detail {

class JsonFileReader {
 public:
  /// Reads up to `size` bytes into `out`: the count, 0 at the end, -1 on an error (the reader
  /// remembers it; the parse then ends as if the input ended there).
  using ReadFn = std::function<long(char* out, std::size_t size)>;

  /// `bufferBytes`: the read size (tests use tiny ones so every token crosses a refill).
  explicit JsonFileReader(std::FILE* f, std::size_t bufferBytes = 1 << 20)
      : JsonFileReader(
            [f](char* out, std::size_t size) -> long {
              const std::size_t n = std::fread(out, 1, size, f);
              return n == 0 && std::ferror(f) ? -1 : static_cast<long>(n);
            },
            bufferBytes) {}
  explicit JsonFileReader(ReadFn read, std::size_t bufferBytes = 1 << 20)
      : m_read(std::move(read)), m_buffer(std::max<std::size_t>(1, bufferBytes)) {
    m_pos = m_end = m_buffer.data();
  }
  /// Bytes consumed so far (offset of the next byte).
  std::uint64_t offset() const { return m_base + static_cast<std::uint64_t>(m_pos - m_buffer.data()); }
  int peek() {
    if (m_pos == m_end && !fill()) return -1;
    return static_cast<unsigned char>(*m_pos);
  }
  int get() {
    if (m_pos == m_end && !fill()) return -1;
    return static_cast<unsigned char>(*m_pos++);
  }
  /// The buffered bytes not yet consumed (refilled by peek/get once used up).
  const char* pos() const { return m_pos; }
  const char* end() const { return m_end; }
  void advanceTo(const char* p) { m_pos = p; }
  /// Whether the source reported an error (as opposed to ending).
  bool failed() const { return m_failed; }

 private:
  bool fill() {
    if (m_eof) return false;
    m_base += static_cast<std::uint64_t>(m_end - m_buffer.data());
    const long n = m_read(m_buffer.data(), m_buffer.size());
    m_pos = m_buffer.data();
    m_end = m_pos + std::max<long>(n, 0);
    if (n <= 0) {
      m_eof = true;
      m_failed = n < 0;
    }
    return n > 0;
  }
  ReadFn m_read;
  std::vector<char> m_buffer;
  const char* m_pos;
  const char* m_end;
  std::uint64_t m_base = 0;
  bool m_eof = false;
  bool m_failed = false;
};

template <typename Handler>
class JsonSaxParser {
 public:
  /// Nesting and token bounds: hostile input is refused, never allocated for.
  static constexpr std::size_t kMaxDepth = 100000;
  static constexpr std::size_t kMaxNumberBytes = 4096;
  static constexpr std::size_t kMaxStringBytes = kMaxTraceStringBytes;

  JsonSaxParser(JsonFileReader& in, Handler& h) : m_in(in), m_h(h) {}

  /// Whether the parse stopped at a limit (string length, nesting) or at text that is not
  /// UTF-8 JSON at all: the file is refused, not imported up to that point as a cut one is.
  bool refused() const { return m_refused; }

  /// After parse() returned true: reads the rest of the input, which must be whitespace. Reading
  /// to the end is what lets a gzip source check its trailer (CRC and length); a document
  /// followed by anything else fails here.
  bool expectEnd() {
    for (int c = m_in.get(); c >= 0; c = m_in.get()) {
      if (!isWhitespace(c))
        return fail("unexpected " + describe(c) + " after the end of the JSON document (expected the end of the file)");
    }
    return true;
  }

  /// True when one complete value was read and the handler never stopped the parse.
  bool parse() {
    if (!skipBom()) return false;
    std::vector<char> open;  // '{' or '[' per open container
    for (;;) {
      // A value is expected here.
      int c = skipWhitespaceGet();
      bool closed = false;  // the value just ended (else a container was opened)
      switch (c) {
        case '{': {
          if (!m_h.start_object()) return false;
          c = skipWhitespaceGet();
          if (c == '}') {
            if (!m_h.end_object()) return false;
            closed = true;
            break;
          }
          if (open.size() >= kMaxDepth) return refuse("nesting deeper than " + std::to_string(kMaxDepth));
          open.push_back('{');
          if (!readKey(c)) return false;
          break;
        }
        case '[': {
          if (!m_h.start_array()) return false;
          c = skipWhitespacePeek();
          if (c == ']') {
            m_in.get();
            if (!m_h.end_array()) return false;
            closed = true;
            break;
          }
          if (open.size() >= kMaxDepth) return refuse("nesting deeper than " + std::to_string(kMaxDepth));
          open.push_back('[');
          break;
        }
        case '"':
          if (!readString(m_text)) return false;
          if (!m_h.string(m_text)) return false;
          closed = true;
          break;
        case 't':
          if (!literal("rue", "true") || !m_h.boolean(true)) return false;
          closed = true;
          break;
        case 'f':
          if (!literal("alse", "false") || !m_h.boolean(false)) return false;
          closed = true;
          break;
        case 'n':
          if (!literal("ull", "null") || !m_h.null()) return false;
          closed = true;
          break;
        case -1:
          return fail("unexpected end of input (expected a value)");
        default:
          if (c == '-' || (c >= '0' && c <= '9')) {
            if (!number(c)) return false;
            closed = true;
            break;
          }
          return fail("unexpected " + describe(c) + " (expected a value)");
      }
      if (!closed) continue;
      // After a value: close containers until one continues with ','.
      for (;;) {
        if (open.empty()) return true;
        c = skipWhitespaceGet();
        const bool object = open.back() == '{';
        if (c == ',') {
          if (object && !readKey(skipWhitespaceGet())) return false;
          break;
        }
        const char close = object ? '}' : ']';
        if (c == close) {
          open.pop_back();
          if (!(object ? m_h.end_object() : m_h.end_array())) return false;
          continue;
        }
        const std::string expected = std::string(" (expected ',' or '") + close + "')";
        return fail(c < 0 ? "unexpected end of input" + expected : "unexpected " + describe(c) + expected);
      }
    }
  }

 private:
  bool fail(const std::string& what) {
    m_h.parse_error(m_in.offset(), what);
    return false;
  }
  bool refuse(const std::string& what) {
    m_refused = true;
    return fail(what);
  }
  static std::string describe(int c) {
    if (c >= 0x20 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "'";
    static constexpr std::string_view kHex = "0123456789abcdef";
    return std::string("byte 0x") + kHex[static_cast<std::size_t>((c >> 4) & 15)] +
           kHex[static_cast<std::size_t>(c & 15)];
  }
  static bool isWhitespace(int c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
  int skipWhitespaceGet() {
    int c = m_in.get();
    while (isWhitespace(c)) c = m_in.get();
    return c;
  }
  int skipWhitespacePeek() {
    int c = m_in.peek();
    while (isWhitespace(c)) {
      m_in.get();
      c = m_in.peek();
    }
    return c;
  }
  bool skipBom() {
    // UTF-16 and UTF-32 text is named as such rather than failing on its first NUL byte.
    if (m_in.peek() >= 0) {
      const std::string_view head(m_in.pos(),
                                  std::min<std::size_t>(4, static_cast<std::size_t>(m_in.end() - m_in.pos())));
      if (auto encoding = wideTextEncoding(head)) return refuse("the file is " + *encoding + " (expected UTF-8 JSON)");
    }
    // A UTF-8 byte order mark is skipped, as nlohmann does; a partial one is refused.
    if (m_in.peek() != 0xEF) return true;
    m_in.get();
    if (m_in.get() != 0xBB || m_in.get() != 0xBF) return fail("invalid byte order mark (expected EF BB BF)");
    return true;
  }

  // `c` is the first byte after '{' or ',' (whitespace skipped): a key, then ':'.
  bool readKey(int c) {
    if (c != '"') {
      return fail(c < 0 ? "unexpected end of input (expected a string key)"
                        : "unexpected " + describe(c) + " (expected a string key)");
    }
    if (!readString(m_key)) return false;
    if (!m_h.key(m_key)) return false;
    c = skipWhitespaceGet();
    if (c != ':') {
      return fail(c < 0 ? "unexpected end of input (expected ':')" : "unexpected " + describe(c) + " (expected ':')");
    }
    return true;
  }

  bool literal(const char* rest, const char* word) {
    for (const char* r = rest; *r; ++r) {
      const int c = m_in.get();
      if (c != static_cast<unsigned char>(*r)) {
        return fail(c < 0 ? std::string("unexpected end of input in '") + word + "'"
                          : "invalid literal (expected '" + std::string(word) + "')");
      }
    }
    return true;
  }

  // The opening quote is consumed. Runs of plain bytes are appended at once; escapes and
  // multi-byte UTF-8 sequences are checked byte by byte.
  bool readString(std::string& out) {
    out.clear();
    const std::uint64_t start = m_in.offset() > 0 ? m_in.offset() - 1 : 0;
    for (;;) {
      const char* p = m_in.pos();
      const char* end = m_in.end();
      const char* run = p;
      while (p != end) {
        const auto u = static_cast<unsigned char>(*p);
        if (u == '"' || u == '\\' || u < 0x20 || u >= 0x80) break;
        ++p;
      }
      out.append(run, static_cast<std::size_t>(p - run));
      m_in.advanceTo(p);
      // Escapes and multi-byte characters add at most 4 bytes a step: checked with the runs.
      if (out.size() > kMaxStringBytes) {
        m_refused = true;
        m_h.parse_error(start,
                        "string longer than " + std::to_string(kMaxStringBytes) +
                            " bytes (the limit for one string or key of a trace; expected names and short text)");
        return false;
      }
      if (p == end) {
        // The buffer ran out inside the string: refill and scan on.
        if (m_in.peek() < 0) return fail("unexpected end of input in a string");
        continue;
      }
      const int c = m_in.get();
      if (c == '"') return true;
      if (c < 0) return fail("unexpected end of input in a string");
      if (c == '\\') {
        if (!escape(out)) return false;
      } else if (c < 0x20) {
        return fail("control character " + describe(c) + " in a string (expected it escaped)");
      } else if (c >= 0x80) {
        if (!utf8(c, out)) return false;
      }
    }
  }

  bool escape(std::string& out) {
    const int c = m_in.get();
    switch (c) {
      case '"':
        out += '"';
        return true;
      case '\\':
        out += '\\';
        return true;
      case '/':
        out += '/';
        return true;
      case 'b':
        out += '\b';
        return true;
      case 'f':
        out += '\f';
        return true;
      case 'n':
        out += '\n';
        return true;
      case 'r':
        out += '\r';
        return true;
      case 't':
        out += '\t';
        return true;
      case 'u':
        break;
      case -1:
        return fail("unexpected end of input in a string");
      default:
        return fail("invalid escape " + describe(c) + " in a string");
    }
    std::uint32_t cp = 0;
    if (!hex4(cp)) return false;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return fail("lone low surrogate \\u escape in a string");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      // RFC 8259 §7: a high surrogate must be followed by an escaped low surrogate.
      if (m_in.get() != '\\' || m_in.get() != 'u') return fail("high surrogate \\u escape without its low surrogate");
      std::uint32_t low = 0;
      if (!hex4(low)) return false;
      if (low < 0xDC00 || low > 0xDFFF) return fail("high surrogate \\u escape without its low surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    appendUtf8(out, cp);
    return true;
  }

  bool hex4(std::uint32_t& cp) {
    for (int i = 0; i < 4; ++i) {
      const int c = m_in.get();
      int v;
      if (c >= '0' && c <= '9') {
        v = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        v = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        v = c - 'A' + 10;
      } else {
        return fail(c < 0 ? "unexpected end of input in a \\u escape" : "invalid \\u escape (expected 4 hex digits)");
      }
      cp = (cp << 4) | static_cast<std::uint32_t>(v);
    }
    return true;
  }

  // `lead` (>= 0x80) is consumed: checks the sequence against RFC 3629 §4 (no overlong
  // forms, no surrogates, nothing above U+10FFFF) and appends it.
  bool utf8(int lead, std::string& out) {
    const std::optional<Utf8Lead> seq = utf8Lead(static_cast<unsigned char>(lead));
    if (!seq) return fail("invalid UTF-8 " + describe(lead) + " in a string");
    out += static_cast<char>(lead);
    for (int i = 0; i < seq->continuationBytes; ++i) {
      const int c = m_in.get();
      const int lo = i == 0 ? seq->firstLo : 0x80;
      const int hi = i == 0 ? seq->firstHi : 0xBF;
      if (c < lo || c > hi) {
        return fail(c < 0 ? "unexpected end of input in a string" : "invalid UTF-8 " + describe(c) + " in a string");
      }
      out += static_cast<char>(c);
    }
    return true;
  }

  // RFC 8259 §6: -? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?; `c` is consumed.
  bool number(int c) {
    std::string& t = m_number;
    t.clear();
    bool isFloat = false;
    const auto digits = [&]() -> bool {
      int n = 0;
      for (int d = m_in.peek(); d >= '0' && d <= '9'; d = m_in.peek()) {
        if (t.size() >= kMaxNumberBytes) return false;
        t += static_cast<char>(m_in.get());
        ++n;
      }
      return n > 0;
    };
    t += static_cast<char>(c);
    if (c == '-') {
      c = m_in.get();
      if (c < '0' || c > '9')
        return fail(c < 0 ? "unexpected end of input in a number" : "invalid number (expected a digit after '-')");
      t += static_cast<char>(c);
    }
    if (c != '0') digits();  // a leading 0 stands alone; "01" fails at the next token
    if (m_in.peek() == '.') {
      isFloat = true;
      t += static_cast<char>(m_in.get());
      if (!digits()) return fail("invalid number (expected a digit after '.')");
    }
    if (m_in.peek() == 'e' || m_in.peek() == 'E') {
      isFloat = true;
      t += static_cast<char>(m_in.get());
      if (m_in.peek() == '+' || m_in.peek() == '-') t += static_cast<char>(m_in.get());
      if (!digits()) return fail("invalid number (expected a digit in the exponent)");
    }
    if (t.size() >= kMaxNumberBytes) return fail("number longer than " + std::to_string(kMaxNumberBytes) + " bytes");
    const char* first = t.data();
    const char* last = t.data() + t.size();
    if (!isFloat) {
      // Integers that do not fit 64 bits are read as floating point (as nlohmann does).
      if (t[0] == '-') {
        std::int64_t v = 0;
        const auto r = std::from_chars(first, last, v);
        if (r.ec == std::errc() && r.ptr == last) return m_h.number_integer(v, t);
      } else {
        std::uint64_t v = 0;
        const auto r = std::from_chars(first, last, v);
        if (r.ec == std::errc() && r.ptr == last) return m_h.number_unsigned(v, t);
      }
    }
    double v = 0;
    const auto r = std::from_chars(first, last, v);
    if (r.ec == std::errc::result_out_of_range) {
      // from_chars leaves v untouched out of range; strtod tells underflow (0 or a denormal,
      // accepted as nlohmann does) from overflow (infinity, refused).
      v = std::strtod(t.c_str(), nullptr);
    } else if (r.ec != std::errc() || r.ptr != last) {
      return fail("invalid number " + t);
    }
    if (!std::isfinite(v)) return fail("number " + t + " out of range");
    return m_h.number_float(v, t);
  }

  JsonFileReader& m_in;
  Handler& m_h;
  bool m_refused = false;
  std::string m_text;
  std::string m_key;
  std::string m_number;
};

}  // namespace pipestudio::history::detail
