#pragma once
/// \file The executor → workstation trace stream (DESIGN.md §2): versioned, framed and
/// binary-safe; a decoder that keeps every complete frame of a truncated stream.
/// Qt-free, SQLite-free: the executor links it on bare GPU nodes.

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

/// First frame of every stream.
struct Header {
  std::uint16_t version = kStreamVersion;
  std::string runId;
  std::int32_t rank = 0;
  std::int32_t world = 1;
  std::string host;
  std::string backend;         ///< cpu | cuda | cuda-single
  std::string deviceName;      ///< "NVIDIA H100 80GB HBM3", "cpu"
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
  std::uint64_t bytes = 0;          ///< memcpy/memset size
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

/// Incremental decoder: feed bytes as they arrive, pull complete frames. A truncated tail is
/// kept until more bytes come; corrupt input stops decoding with an error naming the byte
/// offset, keeping every frame decoded before it.
class StreamDecoder {
 public:
  void feed(std::string_view bytes);
  /// Next complete frame, or nullopt when more bytes are needed (or after an error).
  std::optional<Frame> next();
  /// Set once the stream is known to be corrupt (bad magic, unknown version, bad frame).
  const std::optional<std::string>& error() const { return m_error; }
  /// Bytes buffered that do not form a complete frame yet (non-zero at EOF = truncated).
  std::size_t pendingBytes() const { return m_buffer.size() - m_pos; }
  std::uint64_t consumedBytes() const { return m_consumed; }

 private:
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
};
DecodedStream decodeAll(std::string_view bytes);

}  // namespace pipestudio::trace
