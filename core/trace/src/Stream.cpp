#include "pipestudio/trace/Stream.hpp"

#include <bit>
#include <cstring>
#include <type_traits>

namespace pipestudio::trace {
namespace {

// Little-endian writers. Explicit byte shuffling keeps the format independent of the host's
// endianness and of struct layout (FORMAT.md).
void putU8(std::string& out, std::uint8_t v) { out.push_back(static_cast<char>(v)); }
template <class Unsigned>
void putLittleEndian(std::string& out, Unsigned v) {
  std::array<char, sizeof(Unsigned)> bytes{};
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out.append(bytes.data(), bytes.size());
}
void putU16(std::string& out, std::uint16_t v) { putLittleEndian(out, v); }
void putU32(std::string& out, std::uint32_t v) { putLittleEndian(out, v); }
void putU64(std::string& out, std::uint64_t v) { putLittleEndian(out, v); }
void putI32(std::string& out, std::int32_t v) { putU32(out, static_cast<std::uint32_t>(v)); }
void putI64(std::string& out, std::int64_t v) { putU64(out, static_cast<std::uint64_t>(v)); }
void putF64(std::string& out, double v) { putU64(out, std::bit_cast<std::uint64_t>(v)); }
void putStr(std::string& out, std::string_view s) {
  // Strings longer than a frame can hold are cut, so the encoder never writes a frame the
  // decoder must refuse (names are short; an error message could in principle be huge).
  const std::size_t n = std::min<std::size_t>(s.size(), kMaxFramePayloadBytes / 2);
  putU32(out, static_cast<std::uint32_t>(n));
  out.append(s.data(), n);
}

struct PayloadEncoder {
  std::string& out;
  void operator()(const Header& h) const {
    putU16(out, h.version);
    putStr(out, h.runId);
    putI32(out, h.rank);
    putI32(out, h.world);
    putStr(out, h.host);
    putStr(out, h.backend);
    putStr(out, h.deviceName);
    putI64(out, h.clockOriginNs);
    putI64(out, h.wallClockNs);
  }
  void operator()(const NcclId& n) const { putStr(out, n.bytes); }
  void operator()(const OpRange& o) const {
    putU8(out, o.begin ? 1 : 0);
    putI32(out, o.device);
    putI32(out, o.virtualStage);
    putU8(out, static_cast<std::uint8_t>(o.kind));
    putI32(out, o.microbatch);
    putI32(out, o.iteration);
    putI64(out, o.startNs);
    putI64(out, o.endNs);
  }
  void operator()(const Activity& a) const {
    putU8(out, static_cast<std::uint8_t>(a.kind));
    putI32(out, a.device);
    putU32(out, a.stream);
    putI64(out, a.startNs);
    putI64(out, a.endNs);
    putU64(out, a.bytes);
    putU64(out, a.correlationId);
    putStr(out, a.name);
  }
  void operator()(const MemorySample& m) const {
    putI32(out, m.device);
    putI64(out, m.timeNs);
    putI64(out, m.bytesInUse);
    putI64(out, m.bytesReserved);
  }
  void operator()(const ErrorReport& e) const {
    putI32(out, e.rank);
    putStr(out, e.message);
  }
  void operator()(const Summary& s) const {
    putI32(out, s.iterations);
    putU64(out, s.droppedRecords);
    putI64(out, s.elapsedNs);
    putU8(out, s.ok ? 1 : 0);
    // Keep the frame under the bound: 8 bytes per step time.
    const std::size_t maxSteps = (kMaxFramePayloadBytes - 64) / 8;
    const std::size_t n = std::min(s.iterationMs.size(), maxSteps);
    putU32(out, static_cast<std::uint32_t>(n));
    for (std::size_t i = 0; i < n; ++i) putF64(out, s.iterationMs[i]);
  }
};

// Bounds-checked little-endian reader over one frame's payload. Any read past the end sets
// `bad` and returns zeros; the caller reports the frame as corrupt.
class Reader {
 public:
  explicit Reader(std::string_view data) : m_data(data) {}
  bool bad() const { return m_bad; }
  std::size_t offset() const { return m_pos; }

  std::uint8_t u8() {
    if (!need(1)) return 0;
    return static_cast<std::uint8_t>(m_data[m_pos++]);
  }
  std::uint16_t u16() {
    if (!need(2)) return 0;
    const auto* p = reinterpret_cast<const unsigned char*>(m_data.data() + m_pos);
    m_pos += 2;
    return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
  }
  std::uint32_t u32() {
    if (!need(4)) return 0;
    const auto* p = reinterpret_cast<const unsigned char*>(m_data.data() + m_pos);
    m_pos += 4;
    return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
           (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
  }
  std::uint64_t u64() {
    if (!need(8)) return 0;
    const auto* p = reinterpret_cast<const unsigned char*>(m_data.data() + m_pos);
    m_pos += 8;
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }
  std::int32_t i32() { return static_cast<std::int32_t>(u32()); }
  std::int64_t i64() { return static_cast<std::int64_t>(u64()); }
  double f64() { return std::bit_cast<double>(u64()); }
  std::string str() {
    std::string s;
    strInto(s);
    return s;
  }
  /// Reads a string into `out`, reusing its capacity (no allocation for a name that fits).
  void strInto(std::string& out) {
    const std::uint32_t n = u32();
    if (!need(n)) {
      out.clear();
      return;
    }
    out.assign(m_data.data() + m_pos, n);
    m_pos += n;
  }

 private:
  bool need(std::size_t n) {
    if (m_bad || m_data.size() - m_pos < n) {
      m_bad = true;
      return false;
    }
    return true;
  }
  std::string_view m_data;
  std::size_t m_pos = 0;
  bool m_bad = false;
};

// The alternative T of `frame`, reusing it when `frame` already holds a T (so its strings and
// vectors keep their capacity), else a freshly constructed one.
template <typename T>
T& reuse(Frame& frame) {
  if (auto* p = std::get_if<T>(&frame)) return *p;
  return frame.emplace<T>();
}

// Decodes one known frame's payload into `frame`; returns an error description (then `frame`
// holds a partly decoded value). Every field is written, so nothing of a reused frame leaks.
// Extra trailing bytes are allowed (fields may be appended within version 1, FORMAT.md).
std::optional<std::string> decodePayload(FrameType type, std::string_view payload, Frame& frame) {
  Reader r(payload);
  auto boolean = [&r](const char* field) -> std::variant<bool, std::string> {
    const std::uint8_t b = r.u8();
    if (b > 1) return std::string(field) + " is " + std::to_string(b) + " (expected 0 or 1)";
    return b == 1;
  };
  switch (type) {
    case FrameType::Header: {
      auto& h = reuse<Header>(frame);
      h.version = r.u16();
      r.strInto(h.runId);
      h.rank = r.i32();
      h.world = r.i32();
      r.strInto(h.host);
      r.strInto(h.backend);
      r.strInto(h.deviceName);
      h.clockOriginNs = r.i64();
      h.wallClockNs = r.i64();
      break;
    }
    case FrameType::NcclId: {
      r.strInto(reuse<NcclId>(frame).bytes);
      break;
    }
    case FrameType::OpRange: {
      auto& o = reuse<OpRange>(frame);
      auto b = boolean("begin flag");
      if (auto* e = std::get_if<std::string>(&b)) return *e;
      o.begin = std::get<bool>(b);
      o.device = r.i32();
      o.virtualStage = r.i32();
      const std::uint8_t kind = r.u8();
      if (!r.bad() && kind >= kOpKindCount) {
        return "op kind " + std::to_string(kind) + " out of range (expected 0.." + std::to_string(kOpKindCount - 1) +
               ")";
      }
      o.kind = static_cast<OpKind>(kind);
      o.microbatch = r.i32();
      o.iteration = r.i32();
      o.startNs = r.i64();
      o.endNs = r.i64();
      break;
    }
    case FrameType::Activity: {
      auto& a = reuse<Activity>(frame);
      const std::uint8_t kind = r.u8();
      if (!r.bad() && kind > static_cast<std::uint8_t>(Activity::Kind::Nccl)) {
        return "activity kind " + std::to_string(kind) + " out of range (expected 0..3)";
      }
      a.kind = static_cast<Activity::Kind>(kind);
      a.device = r.i32();
      a.stream = r.u32();
      a.startNs = r.i64();
      a.endNs = r.i64();
      a.bytes = r.u64();
      a.correlationId = r.u64();
      r.strInto(a.name);
      break;
    }
    case FrameType::MemorySample: {
      auto& m = reuse<MemorySample>(frame);
      m.device = r.i32();
      m.timeNs = r.i64();
      m.bytesInUse = r.i64();
      m.bytesReserved = r.i64();
      break;
    }
    case FrameType::ErrorReport: {
      auto& e = reuse<ErrorReport>(frame);
      e.rank = r.i32();
      r.strInto(e.message);
      break;
    }
    case FrameType::Summary: {
      auto& s = reuse<Summary>(frame);
      s.iterations = r.i32();
      s.droppedRecords = r.u64();
      s.elapsedNs = r.i64();
      auto b = boolean("ok flag");
      if (auto* e = std::get_if<std::string>(&b)) return *e;
      s.ok = std::get<bool>(b);
      const std::uint32_t n = r.u32();
      // The count is checked against the bytes really present before reserving, so a
      // corrupt count cannot allocate.
      if (!r.bad() && (payload.size() - r.offset()) / 8 < n) {
        return "step-time count " + std::to_string(n) + " exceeds the frame";
      }
      s.iterationMs.clear();
      s.iterationMs.reserve(n);
      for (std::uint32_t i = 0; i < n; ++i) s.iterationMs.push_back(r.f64());
      break;
    }
  }
  if (r.bad()) return "payload of " + std::to_string(payload.size()) + " bytes is too short for its fields";
  return std::nullopt;
}

}  // namespace

FrameType frameType(const Frame& frame) {
  static_assert(std::variant_size_v<Frame> == 7);
  return static_cast<FrameType>(frame.index() + 1);
}

std::string_view frameTypeName(FrameType type) {
  switch (type) {
    case FrameType::Header:
      return "header";
    case FrameType::NcclId:
      return "nccl_id";
    case FrameType::OpRange:
      return "op_range";
    case FrameType::Activity:
      return "activity";
    case FrameType::MemorySample:
      return "memory_sample";
    case FrameType::ErrorReport:
      return "error";
    case FrameType::Summary:
      return "summary";
  }
  return "unknown";
}

void encodeStreamStart(std::string& out) {
  out.append(kStreamMagic.data(), kStreamMagic.size());
  putU16(out, kStreamVersion);
  putU16(out, 0);  // reserved flags
}

void encodeHeartbeat(std::string& out) {
  putU8(out, kHeartbeatFrameType);
  putU32(out, 0);  // no payload
}

void encodeFrame(const Frame& frame, std::string& out) {
  putU8(out, static_cast<std::uint8_t>(frameType(frame)));
  const std::size_t lengthAt = out.size();
  putU32(out, 0);  // patched below, once the payload size is known
  const std::size_t payloadAt = out.size();
  std::visit(PayloadEncoder{out}, frame);
  const auto length = static_cast<std::uint32_t>(out.size() - payloadAt);
  for (int i = 0; i < 4; ++i) out[lengthAt + i] = static_cast<char>((length >> (8 * i)) & 0xff);
}

std::string encodeStream(const std::vector<Frame>& frames) {
  std::string out;
  encodeStreamStart(out);
  for (const auto& f : frames) encodeFrame(f, out);
  return out;
}

void StreamDecoder::fail(std::uint64_t offset, const std::string& what) {
  m_error = "trace stream: byte " + std::to_string(offset) + ": " + what;
  m_buffer.clear();
  m_pos = 0;
}

void StreamDecoder::compact() {
  // Drop consumed bytes once they dominate the buffer: amortised O(1) per byte.
  if (m_pos > 0 && m_pos >= m_buffer.size() / 2) {
    m_buffer.erase(0, m_pos);
    m_pos = 0;
  }
}

void StreamDecoder::feed(std::string_view bytes) {
  if (m_error) return;
  compact();
  m_buffer.append(bytes.data(), bytes.size());
}

std::optional<Frame> StreamDecoder::next() {
  Frame frame;
  if (!next(frame)) return std::nullopt;
  return frame;
}

bool StreamDecoder::next(Frame& frame) {
  while (!m_error) {
    std::string_view avail(m_buffer.data() + m_pos, m_buffer.size() - m_pos);
    if (!m_startSeen) {
      // Check the magic byte by byte so a wrong stream fails early, before 8 bytes arrive.
      const std::size_t n = std::min(avail.size(), kStreamMagic.size());
      if (std::memcmp(avail.data(), kStreamMagic.data(), n) != 0) {
        fail(m_consumed, "bad magic (not a PipeStudio trace stream; expected \"PSTR\")");
        return false;
      }
      if (avail.size() < kStreamStartBytes) return false;
      Reader r(avail.substr(4, 4));
      const std::uint16_t version = r.u16();
      if (version != kStreamVersion) {
        fail(m_consumed + 4, "unsupported stream version " + std::to_string(version) + " (this build reads version " +
                                 std::to_string(kStreamVersion) + ")");
        return false;
      }
      m_startSeen = true;
      m_pos += kStreamStartBytes;
      m_consumed += kStreamStartBytes;
      continue;
    }
    if (avail.size() < 1) return false;
    const auto type = static_cast<std::uint8_t>(avail[0]);
    const bool extension = type >= kFirstExtensionFrameType;
    if (!extension && (type == 0 || type > static_cast<std::uint8_t>(FrameType::Summary))) {
      fail(m_consumed, "unknown frame type " + std::to_string(type));
      return false;
    }
    if (avail.size() < kFrameHeaderBytes) return false;
    Reader lr(avail.substr(1, 4));
    const std::uint32_t length = lr.u32();
    if (length > kMaxFramePayloadBytes) {
      fail(m_consumed, "frame length " + std::to_string(length) + " exceeds the limit of " +
                           std::to_string(kMaxFramePayloadBytes) + " bytes");
      return false;
    }
    if (avail.size() - kFrameHeaderBytes < length) return false;  // truncated so far
    const std::uint64_t frameOffset = m_consumed;
    const std::string_view payload = avail.substr(kFrameHeaderBytes, length);
    m_pos += kFrameHeaderBytes + length;
    m_consumed += kFrameHeaderBytes + length;
    if (extension) {
      ++m_skipped;
      continue;
    }
    const auto ft = static_cast<FrameType>(type);
    if (!m_headerSeen && ft != FrameType::Header) {
      fail(frameOffset, std::string(frameTypeName(ft)) + " frame before the header (expected a header frame first)");
      return false;
    }
    if (auto err = decodePayload(ft, payload, frame)) {
      fail(frameOffset, std::string(frameTypeName(ft)) + " frame: " + *err);
      return false;
    }
    m_headerSeen = true;
    return true;
  }
  return false;
}

DecodedStream decodeAll(std::string_view bytes) {
  StreamDecoder decoder;
  decoder.feed(bytes);
  DecodedStream out;
  while (auto f = decoder.next()) out.frames.push_back(std::move(*f));
  out.error = decoder.error();
  out.truncatedBytes = decoder.error() ? 0 : decoder.pendingBytes();
  out.skippedFrames = decoder.skippedFrames();
  return out;
}

}  // namespace pipestudio::trace
