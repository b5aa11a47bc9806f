#include "pipestudio/trace/TaskLines.hpp"

#include <array>
#include <charconv>

namespace pipestudio::trace {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<signed char, 256> decodeTable() {
  std::array<signed char, 256> t{};
  for (auto& v : t) v = -1;
  for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(kAlphabet[i])] = static_cast<signed char>(i);
  return t;
}
constexpr auto kDecode = decodeTable();

void appendPrefix(int rank, TaskLineKind kind, std::string& out) {
  out += kTaskLinePrefix;
  out += std::to_string(rank);
  out += ' ';
  out += static_cast<char>(kind);
  out += ' ';
}

bool parseInt(std::string_view text, int& value) {
  if (text.empty() || text.size() > 9) return false;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && p == text.data() + text.size() && value >= 0;
}

}  // namespace

std::string base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const auto a = static_cast<unsigned char>(bytes[i]);
    const auto b = static_cast<unsigned char>(bytes[i + 1]);
    const auto c = static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[a >> 2];
    out += kAlphabet[((a & 3) << 4) | (b >> 4)];
    out += kAlphabet[((b & 15) << 2) | (c >> 6)];
    out += kAlphabet[c & 63];
  }
  if (i + 1 == bytes.size()) {
    const auto a = static_cast<unsigned char>(bytes[i]);
    out += kAlphabet[a >> 2];
    out += kAlphabet[(a & 3) << 4];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const auto a = static_cast<unsigned char>(bytes[i]);
    const auto b = static_cast<unsigned char>(bytes[i + 1]);
    out += kAlphabet[a >> 2];
    out += kAlphabet[((a & 3) << 4) | (b >> 4)];
    out += kAlphabet[(b & 15) << 2];
    out += '=';
  }
  return out;
}

bool base64Decode(std::string_view text, std::string& out) {
  out.clear();
  if (text.size() % 4 != 0) return false;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char ch = text[i + static_cast<std::size_t>(k)];
      if (ch == '=' && last && k >= 2) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad > 0) return false;  // data after padding
      v[k] = kDecode[static_cast<unsigned char>(ch)];
      if (v[k] < 0) return false;
    }
    out += static_cast<char>((v[0] << 2) | (v[1] >> 4));
    if (pad < 2) out += static_cast<char>(((v[1] & 15) << 4) | (v[2] >> 2));
    if (pad < 1) out += static_cast<char>(((v[2] & 3) << 6) | v[3]);
  }
  return true;
}

void appendTaskLines(int rank, TaskLineKind kind, std::string_view bytes, std::string& out) {
  for (std::size_t off = 0; off < bytes.size(); off += kTaskLineChunkBytes) {
    appendPrefix(rank, kind, out);
    out += base64Encode(bytes.substr(off, kTaskLineChunkBytes));
    out += '\n';
  }
}

void appendTaskExit(int rank, int status, std::string& out) {
  appendPrefix(rank, TaskLineKind::Exit, out);
  out += std::to_string(status);
  out += '\n';
}

TaskLineParse parseTaskLine(std::string_view line, TaskLine& out, std::string* why) {
  auto malformed = [&](const char* what) {
    if (why != nullptr) *why = what;
    return TaskLineParse::Malformed;
  };
  if (line.substr(0, kTaskLinePrefix.size()) != kTaskLinePrefix) return TaskLineParse::NotATaskLine;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.size() > kMaxTaskLineBytes) return malformed("line longer than the launcher keeps whole");
  std::string_view rest = line.substr(kTaskLinePrefix.size());
  const auto space = rest.find(' ');
  if (space == std::string_view::npos || !parseInt(rest.substr(0, space), out.rank)) {
    return malformed("expected a rank number after the prefix");
  }
  rest.remove_prefix(space + 1);
  if (rest.size() < 2 || rest[1] != ' ') return malformed("expected a one-letter kind (s, e or x)");
  const char kind = rest[0];
  rest.remove_prefix(2);
  switch (kind) {
    case 's':
    case 'e':
      out.kind = kind == 's' ? TaskLineKind::Stream : TaskLineKind::Log;
      if (!base64Decode(rest, out.bytes)) return malformed("payload is not base64");
      return TaskLineParse::Ok;
    case 'x':
      out.kind = TaskLineKind::Exit;
      out.bytes.clear();
      if (!parseInt(rest, out.status)) return malformed("expected an exit status");
      return TaskLineParse::Ok;
    default:
      return malformed("expected a one-letter kind (s, e or x)");
  }
}

}  // namespace pipestudio::trace
