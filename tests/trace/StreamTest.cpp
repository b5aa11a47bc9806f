#include <gtest/gtest.h>

#include <limits>

#include "pipestudio/trace/Stream.hpp"

using namespace pipestudio;
using namespace pipestudio::trace;

namespace {

Header sampleHeader() {
  Header h;
  h.runId = "run-42";
  h.rank = 3;
  h.world = 8;
  h.host = "gpu-node-07";
  h.backend = "cuda";
  h.deviceName = "NVIDIA H100 80GB HBM3";
  h.clockOriginNs = 123456789012345;
  h.wallClockNs = 1700000000123456789;
  return h;
}

// One frame of every type, with extreme values where the encoding could go wrong.
std::vector<Frame> sampleFrames() {
  std::vector<Frame> frames;
  frames.emplace_back(sampleHeader());
  NcclId id;
  for (int i = 0; i < 128; ++i) id.bytes.push_back(static_cast<char>(i * 7));  // includes NUL and 0xff-ish bytes
  frames.emplace_back(id);
  frames.emplace_back(OpRange{true, 1, 5, OpKind::B, 17, 2, 1000, 1000});
  frames.emplace_back(OpRange{false, 1, 5, OpKind::OPT, 17, 2, -5, std::numeric_limits<std::int64_t>::max()});
  frames.emplace_back(Activity{Activity::Kind::Nccl, 2, 0xffffffffu, 10, 20, 0, 99, "ncclDevKernel_SendRecv"});
  frames.emplace_back(Activity{Activity::Kind::Memcpy, 0, 7, 30, 40, std::numeric_limits<std::uint64_t>::max(), 1,
                               std::string("Memcpy HtoD\0x", 13)});
  frames.emplace_back(MemorySample{3, 55, 1LL << 40, (1LL << 40) + 5});
  frames.emplace_back(ErrorReport{-1, "CUDA error: out of memory (cudaMalloc 4 GiB)"});
  Summary s;
  s.iterations = 3;
  s.droppedRecords = 12;
  s.elapsedNs = 9876543210;
  s.ok = false;
  s.iterationMs = {101.5, 99.25, -0.0, std::numeric_limits<double>::infinity()};
  frames.emplace_back(s);
  return frames;
}

bool sameFrame(const Frame& a, const Frame& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&b](const auto& x) -> bool {
        using T = std::decay_t<decltype(x)>;
        const auto& y = std::get<T>(b);
        if constexpr (std::is_same_v<T, Header>) {
          return x.version == y.version && x.runId == y.runId && x.rank == y.rank && x.world == y.world &&
                 x.host == y.host && x.backend == y.backend && x.deviceName == y.deviceName &&
                 x.clockOriginNs == y.clockOriginNs && x.wallClockNs == y.wallClockNs;
        } else if constexpr (std::is_same_v<T, NcclId>) {
          return x.bytes == y.bytes;
        } else if constexpr (std::is_same_v<T, OpRange>) {
          return x.begin == y.begin && x.device == y.device && x.virtualStage == y.virtualStage && x.kind == y.kind &&
                 x.microbatch == y.microbatch && x.iteration == y.iteration && x.startNs == y.startNs &&
                 x.endNs == y.endNs;
        } else if constexpr (std::is_same_v<T, Activity>) {
          return x.kind == y.kind && x.device == y.device && x.stream == y.stream && x.startNs == y.startNs &&
                 x.endNs == y.endNs && x.bytes == y.bytes && x.correlationId == y.correlationId && x.name == y.name;
        } else if constexpr (std::is_same_v<T, MemorySample>) {
          return x.device == y.device && x.timeNs == y.timeNs && x.bytesInUse == y.bytesInUse &&
                 x.bytesReserved == y.bytesReserved;
        } else if constexpr (std::is_same_v<T, ErrorReport>) {
          return x.rank == y.rank && x.message == y.message;
        } else {
          if (x.iterations != y.iterations || x.droppedRecords != y.droppedRecords || x.elapsedNs != y.elapsedNs ||
              x.ok != y.ok || x.iterationMs.size() != y.iterationMs.size())
            return false;
          for (std::size_t i = 0; i < x.iterationMs.size(); ++i) {
            if (std::bit_cast<std::uint64_t>(x.iterationMs[i]) != std::bit_cast<std::uint64_t>(y.iterationMs[i]))
              return false;
          }
          return true;
        }
      },
      a);
}

// Byte offsets at which each frame of `frames` ends in encodeStream(frames).
std::vector<std::size_t> frameEnds(const std::vector<Frame>& frames) {
  std::vector<std::size_t> ends;
  std::string out;
  encodeStreamStart(out);
  for (const auto& f : frames) {
    encodeFrame(f, out);
    ends.push_back(out.size());
  }
  return ends;
}

void putU32At(std::string& s, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

TEST(Stream, RoundTripsEveryFrameType) {
  const auto frames = sampleFrames();
  const std::string bytes = encodeStream(frames);
  EXPECT_EQ(bytes.substr(0, 4), "PSTR");
  const auto decoded = decodeAll(bytes);
  ASSERT_FALSE(decoded.error) << *decoded.error;
  EXPECT_EQ(decoded.truncatedBytes, 0u);
  ASSERT_EQ(decoded.frames.size(), frames.size());
  for (std::size_t i = 0; i < frames.size(); ++i) {
    EXPECT_TRUE(sameFrame(frames[i], decoded.frames[i])) << "frame " << i;
    EXPECT_EQ(frameType(frames[i]), frameType(decoded.frames[i]));
  }
  // Every type is covered by the sample.
  std::vector<bool> seen(8, false);
  for (const auto& f : frames) seen[static_cast<int>(frameType(f))] = true;
  for (int t = 1; t <= 7; ++t) EXPECT_TRUE(seen[t]) << frameTypeName(static_cast<FrameType>(t));
}

// next(Frame&) reuses the frame it is given: a long name followed by a shorter one, a
// Summary with many step times followed by one with fewer, and every type switch in between
// must decode exactly what next() decodes, with nothing left over from the previous frame.
TEST(Stream, DecodingIntoAReusedFrameLeavesNothingBehind) {
  std::vector<Frame> frames = sampleFrames();
  frames.emplace_back(Activity{Activity::Kind::Kernel, 1, 2, 3, 4, 5, 6, std::string(300, 'k')});
  frames.emplace_back(Activity{Activity::Kind::Memset, 0, 0, 0, 0, 0, 0, "x"});
  frames.emplace_back(Activity{Activity::Kind::Kernel, 3, 1, 7, 9, 0, 0, ""});
  Summary few;
  few.iterationMs = {1.0};
  frames.emplace_back(few);
  frames.emplace_back(sampleHeader());
  frames.emplace_back(OpRange{false, 0, 0, OpKind::F, 0, 0, 1, 2});
  const std::string bytes = encodeStream(frames);
  StreamDecoder decoder;
  decoder.feed(bytes);
  Frame reused;
  std::size_t i = 0;
  while (decoder.next(reused)) {
    ASSERT_LT(i, frames.size());
    EXPECT_TRUE(sameFrame(frames[i], reused)) << "frame " << i;
    ++i;
  }
  EXPECT_EQ(i, frames.size());
  EXPECT_FALSE(decoder.error());
  EXPECT_EQ(decoder.pendingBytes(), 0u);
}

TEST(Stream, FixedLittleEndianLayout) {
  // The exact bytes of a start and one memory sample: guards FORMAT.md against drift.
  std::string out;
  encodeStreamStart(out);
  encodeFrame(MemorySample{1, 0x0102, 3, 4}, out);
  const std::string expected = std::string("PSTR\x01\x00\x00\x00", 8) +
                               std::string("\x05\x1c\x00\x00\x00", 5) +  // type 5, 28 bytes
                               std::string("\x01\x00\x00\x00", 4) + std::string("\x02\x01\0\0\0\0\0\0", 8) +
                               std::string("\x03\0\0\0\0\0\0\0", 8) + std::string("\x04\0\0\0\0\0\0\0", 8);
  EXPECT_EQ(out, expected);
}

TEST(Stream, IncrementalFeedByteByByte) {
  const auto frames = sampleFrames();
  const std::string bytes = encodeStream(frames);
  StreamDecoder decoder;
  std::vector<Frame> got;
  for (char c : bytes) {
    decoder.feed(std::string_view(&c, 1));
    while (auto f = decoder.next()) got.push_back(std::move(*f));
  }
  ASSERT_FALSE(decoder.error());
  EXPECT_EQ(decoder.pendingBytes(), 0u);
  EXPECT_EQ(decoder.consumedBytes(), bytes.size());
  ASSERT_EQ(got.size(), frames.size());
  for (std::size_t i = 0; i < frames.size(); ++i) EXPECT_TRUE(sameFrame(frames[i], got[i]));
}

TEST(Stream, TruncationAtEveryOffsetKeepsEveryCompleteFrame) {
  const auto frames = sampleFrames();
  const std::string bytes = encodeStream(frames);
  const auto ends = frameEnds(frames);
  for (std::size_t cut = 0; cut <= bytes.size(); ++cut) {
    const auto decoded = decodeAll(std::string_view(bytes).substr(0, cut));
    ASSERT_FALSE(decoded.error) << "cut " << cut << ": " << *decoded.error;
    std::size_t complete = 0;
    while (complete < ends.size() && ends[complete] <= cut) ++complete;
    ASSERT_EQ(decoded.frames.size(), complete) << "cut " << cut;
    for (std::size_t i = 0; i < complete; ++i) EXPECT_TRUE(sameFrame(frames[i], decoded.frames[i]));
    const std::size_t completeEnd =
        complete == 0 ? (cut >= kStreamStartBytes ? kStreamStartBytes : 0) : ends[complete - 1];
    EXPECT_EQ(decoded.truncatedBytes, cut - completeEnd) << "cut " << cut;
  }
}

TEST(Stream, BadMagicAndVersion) {
  auto d = decodeAll("GIF89a....");
  ASSERT_TRUE(d.error);
  EXPECT_NE(d.error->find("byte 0"), std::string::npos) << *d.error;
  EXPECT_NE(d.error->find("magic"), std::string::npos);
  // A wrong first byte fails without waiting for the full start.
  EXPECT_TRUE(decodeAll("X").error);
  EXPECT_FALSE(decodeAll("PS").error);  // still a possible prefix

  std::string v2 = encodeStream({sampleHeader()});
  v2[4] = 2;
  d = decodeAll(v2);
  ASSERT_TRUE(d.error);
  EXPECT_NE(d.error->find("byte 4"), std::string::npos) << *d.error;
  EXPECT_NE(d.error->find("version 2"), std::string::npos) << *d.error;
  EXPECT_TRUE(d.frames.empty());
}

TEST(Stream, UnknownFrameTypeIsCorruptionAtItsOffset) {
  const auto frames = sampleFrames();
  std::string bytes = encodeStream(frames);
  const auto ends = frameEnds(frames);
  bytes[ends[2]] = 42;  // type byte of frame 3
  const auto d = decodeAll(bytes);
  ASSERT_TRUE(d.error);
  EXPECT_NE(d.error->find("byte " + std::to_string(ends[2])), std::string::npos) << *d.error;
  EXPECT_NE(d.error->find("unknown frame type 42"), std::string::npos) << *d.error;
  EXPECT_EQ(d.frames.size(), 3u);  // frames before the corruption are kept
  std::string zero = bytes;
  zero[ends[2]] = 0;
  EXPECT_TRUE(decodeAll(zero).error);
}

TEST(Stream, ExtensionFramesAreSkipped) {
  std::string bytes = encodeStream({sampleHeader()});
  bytes += std::string(
      "\xc8\x03\x00\x00\x00"
      "abc",
      8);  // type 200, 3 bytes
  encodeFrame(MemorySample{0, 1, 2, 3}, bytes);
  const auto d = decodeAll(bytes);
  ASSERT_FALSE(d.error) << *d.error;
  EXPECT_EQ(d.frames.size(), 2u);
  EXPECT_EQ(d.skippedFrames, 1u);
}

TEST(Stream, HugeLengthIsRefusedWithoutAllocating) {
  std::string bytes = encodeStream({sampleHeader()});
  const std::size_t at = bytes.size();
  encodeFrame(ErrorReport{0, "x"}, bytes);
  putU32At(bytes, at + 1, 0xfffffff0u);
  StreamDecoder decoder;
  decoder.feed(bytes);
  ASSERT_TRUE(decoder.next());  // header
  EXPECT_FALSE(decoder.next());
  ASSERT_TRUE(decoder.error());
  EXPECT_NE(decoder.error()->find("byte " + std::to_string(at)), std::string::npos) << *decoder.error();
  EXPECT_NE(decoder.error()->find("exceeds the limit"), std::string::npos);
  // After an error, further input is ignored and nothing is buffered.
  decoder.feed(std::string(1000, 'x'));
  EXPECT_FALSE(decoder.next());
  EXPECT_EQ(decoder.pendingBytes(), 0u);

  // Exactly at the bound is accepted as "more bytes needed" (not an error).
  std::string atBound = encodeStream({sampleHeader()});
  const std::size_t boundAt = atBound.size();
  atBound += std::string("\x06\0\0\0\0", 5);
  putU32At(atBound, boundAt + 1, kMaxFramePayloadBytes);
  EXPECT_FALSE(decodeAll(atBound).error);
}

TEST(Stream, CorruptPayloads) {
  // A string length pointing past the end of its frame.
  std::string bytes = encodeStream({sampleHeader()});
  const std::size_t at = bytes.size();
  encodeFrame(ErrorReport{0, "hello"}, bytes);
  putU32At(bytes, at + 5 + 4, 1000000);
  auto d = decodeAll(bytes);
  ASSERT_TRUE(d.error);
  EXPECT_NE(d.error->find("byte " + std::to_string(at)), std::string::npos) << *d.error;
  EXPECT_NE(d.error->find("error frame"), std::string::npos) << *d.error;
  EXPECT_EQ(d.frames.size(), 1u);

  // Out-of-range enum and flag values.
  std::string op = encodeStream({sampleHeader()});
  const std::size_t opAt = op.size();
  encodeFrame(OpRange{true, 0, 0, OpKind::F, 0, 0, 0, 0}, op);
  std::string badKind = op;
  badKind[opAt + 5 + 1 + 4 + 4] = 42;  // past every kind, D2H and H2D included
  d = decodeAll(badKind);
  ASSERT_TRUE(d.error);
  EXPECT_NE(d.error->find("op kind 42"), std::string::npos) << *d.error;
  std::string badFlag = op;
  badFlag[opAt + 5] = 7;
  EXPECT_TRUE(decodeAll(badFlag).error);

  // A frame too short for its fields.
  std::string shortFrame = encodeStream({sampleHeader()});
  shortFrame += std::string(
      "\x05\x03\x00\x00\x00"
      "abc",
      8);
  d = decodeAll(shortFrame);
  ASSERT_TRUE(d.error);
  EXPECT_NE(d.error->find("too short"), std::string::npos) << *d.error;

  // A step-time count larger than the frame.
  std::string sum = encodeStream({sampleHeader()});
  const std::size_t sAt = sum.size();
  encodeFrame(Summary{1, 0, 0, true, {1.0}}, sum);
  putU32At(sum, sAt + 5 + 4 + 8 + 8 + 1, 0x7fffffff);
  d = decodeAll(sum);
  ASSERT_TRUE(d.error);
  EXPECT_NE(d.error->find("step-time count"), std::string::npos) << *d.error;
}

TEST(Stream, HeaderMustComeFirst) {
  std::string bytes;
  encodeStreamStart(bytes);
  encodeFrame(MemorySample{}, bytes);
  const auto d = decodeAll(bytes);
  ASSERT_TRUE(d.error);
  EXPECT_NE(d.error->find("before the header"), std::string::npos) << *d.error;
}

TEST(Stream, AppendedFieldsAreToleratedWithinAVersion) {
  // A newer writer may append fields to a frame; this reader ignores the extra bytes.
  std::string bytes = encodeStream({sampleHeader()});
  const std::size_t at = bytes.size();
  encodeFrame(MemorySample{1, 2, 3, 4}, bytes);
  bytes += "zz";
  putU32At(bytes, at + 1, 28 + 2);
  const auto d = decodeAll(bytes);
  ASSERT_FALSE(d.error) << *d.error;
  ASSERT_EQ(d.frames.size(), 2u);
  EXPECT_EQ(std::get<MemorySample>(d.frames[1]).bytesReserved, 4);
}

TEST(Stream, FuzzedMutationsNeverCrash) {
  // Deterministic byte flips over the sample: decoding must end with frames or an error,
  // never crash, and never report frames after the error offset.
  const std::string bytes = encodeStream(sampleFrames());
  std::uint32_t seed = 12345;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string m = bytes;
    for (int k = 0; k < 3; ++k) {
      seed = seed * 1664525u + 1013904223u;
      m[(seed >> 8) % m.size()] = static_cast<char>(seed >> 24);
    }
    const auto d = decodeAll(m);
    EXPECT_LE(d.frames.size(), sampleFrames().size() + 3);
  }
}
