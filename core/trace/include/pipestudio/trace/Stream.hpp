#pragma once
/// \file The executor → workstation trace stream (docs/formats.md): versioned, framed and
/// binary-safe; a decoder that keeps every complete frame of a truncated stream.
/// Qt-free, SQLite-free: the executor links it on bare GPU nodes.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio::trace {

inline constexpr std::uint16_t kStreamVersion = 1;

/// Wire constants (core/trace/FORMAT.md). A stream starts with kStreamMagic followed by
/// the version (u16 LE) and a reserved u16 (0); then frames of
/// `u8 type | u32 LE payload length | payload`.
inline constexpr std::array<char, 4> kStreamMagic{'P', 'S', 'T', 'R'};
inline constexpr std::size_t kStreamStartBytes = 8;
inline constexpr std::size_t kFrameHeaderBytes = 5;
/// Upper bound on one frame's payload: a corrupt length never makes the decoder buffer or
/// allocate more than this (4 MiB holds a Summary of 500k step times).
inline constexpr std::uint32_t kMaxFramePayloadBytes = 4u << 20;

/// Frame type codes on the wire. 1..127 are defined (unknown ones there are corruption);
/// 128..255 are optional extension frames that a decoder skips (counted in skippedFrames()).
enum class FrameType : std::uint8_t {
  Header = 1,
  NcclId = 2,
  OpRange = 3,
  Activity = 4,
  MemorySample = 5,
  ErrorReport = 6,
  Summary = 7,
};
inline constexpr std::uint8_t kFirstExtensionFrameType = 128;
/// Extension frame without payload: the rank is alive and its run goes on. pipestudio-exec
/// writes one about every second, after its header, until its run has failed; a launcher
/// that reads nothing from a rank for longer than the run's timeout stops it (a stopped or
/// hung process). Decoders skip it like any extension frame.
inline constexpr std::uint8_t kHeartbeatFrameType = kFirstExtensionFrameType;

/// First frame of every stream.
struct Header {
  std::uint16_t version = kStreamVersion;
  std::string runId;
  std::int32_t rank = 0;
  std::int32_t world = 1;
  std::string host;
  std::string backend;             ///< cpu | cuda | cuda-single
  std::string deviceName;          ///< "NVIDIA H100 80GB HBM3", "cpu"
  std::int64_t clockOriginNs = 0;  ///< host steady-clock value that timestamps are relative to
  std::int64_t wallClockNs = 0;    ///< realtime clock at the origin (to place runs in time)
};

/// Rank 0's NCCL unique id (raw 128 bytes), sent right after its header.
struct NcclId {
  std::string bytes;
};

/// An op range. `end` frames carry both times; `begin` frames have endNs == startNs.
struct OpRange {
  bool begin = false;
  std::int32_t device = 0;
  std::int32_t virtualStage = 0;
  OpKind kind = OpKind::F;
  std::int32_t microbatch = 0;
  std::int32_t iteration = 0;
  std::int64_t startNs = 0;
  std::int64_t endNs = 0;
};

/// A CUPTI activity record (or its CPU-backend equivalent), on the host clock.
struct Activity {
  enum class Kind : std::uint8_t { Kernel, Memcpy, Memset, Nccl };
  Kind kind = Kind::Kernel;
  std::int32_t device = 0;
  std::uint32_t stream = 0;
  std::int64_t startNs = 0;
  std::int64_t endNs = 0;
  std::uint64_t bytes = 0;  ///< memcpy/memset size
  std::uint64_t correlationId = 0;
  std::string name;
};

struct MemorySample {
  std::int32_t device = 0;
  std::int64_t timeNs = 0;
  std::int64_t bytesInUse = 0;
  std::int64_t bytesReserved = 0;
};

struct ErrorReport {
  std::int32_t rank = 0;
  std::string message;
};

struct Summary {
  std::int32_t iterations = 0;
  std::uint64_t droppedRecords = 0;
  std::int64_t elapsedNs = 0;
  bool ok = true;
  std::vector<double> iterationMs;  ///< measured step times
};

using Frame = std::variant<Header, NcclId, OpRange, Activity, MemorySample, ErrorReport, Summary>;

/// Appends the encoding of `frame` to `out`. The very first bytes of a stream are the magic
/// and version written by encodeStreamStart().
void encodeStreamStart(std::string& out);
void encodeFrame(const Frame& frame, std::string& out);
/// Appends a heartbeat frame (kHeartbeatFrameType).
void encodeHeartbeat(std::string& out);
/// Stream start followed by every frame (tests, files).
std::string encodeStream(const std::vector<Frame>& frames);
/// The wire type of a frame, and its name ("header", "op_range", …) for messages.
FrameType frameType(const Frame& frame);
std::string_view frameTypeName(FrameType type);

/// Incremental decoder: feed bytes as they arrive, pull complete frames. A truncated tail is
/// kept until more bytes come; corrupt input stops decoding with an error naming the byte
/// offset, keeping every frame decoded before it.
class StreamDecoder {
 public:
  void feed(std::string_view bytes);
  /// Next complete frame, or nullopt when more bytes are needed (or after an error).
  std::optional<Frame> next();
  /// Same as next(), decoding into `frame` and reusing its storage when it already holds the
  /// next frame's type (a kernel name then costs no allocation): the ingest hot path.
  /// Returns false where next() returns nullopt; `frame` is then unspecified.
  bool next(Frame& frame);
  /// Set once the stream is known to be corrupt (bad magic, unknown version, bad frame).
  const std::optional<std::string>& error() const { return m_error; }
  /// Bytes buffered that do not form a complete frame yet (non-zero at EOF = truncated).
  std::size_t pendingBytes() const { return m_buffer.size() - m_pos; }
  std::uint64_t consumedBytes() const { return m_consumed; }
  /// Extension frames (types >= 128) skipped so far.
  std::uint64_t skippedFrames() const { return m_skipped; }
  /// True once the first frame (which must be a Header) has been decoded.
  bool headerSeen() const { return m_headerSeen; }

 private:
  void fail(std::uint64_t offset, const std::string& what);
  void compact();

  bool m_headerSeen = false;
  std::uint64_t m_skipped = 0;
  std::string m_buffer;
  std::size_t m_pos = 0;
  std::uint64_t m_consumed = 0;
  bool m_startSeen = false;
  std::optional<std::string> m_error;
};

/// Decodes a whole buffer (tests, files): frames plus the error/truncation status.
struct DecodedStream {
  std::vector<Frame> frames;
  std::optional<std::string> error;
  std::size_t truncatedBytes = 0;
  std::uint64_t skippedFrames = 0;
};
DecodedStream decodeAll(std::string_view bytes);

}  // namespace pipestudio::trace
