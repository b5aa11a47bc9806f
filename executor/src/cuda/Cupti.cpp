// CUPTI Activity API: asynchronous buffers of kernel, memcpy and memset records, delivered to
// the completion callback, converted to the host clock and written as trace frames.
#include <cuda.h>
#include <cupti.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <vector>

#include "ClockAnchors.hpp"
#include "Cuda.hpp"
#include "Kernels.hpp"
#include "pipestudio/common/Try.hpp"

namespace pipestudio::exec::cuda {
namespace {

// 4 MiB per buffer: a few thousand records, flushed at least once per iteration.
constexpr std::size_t kBufferBytes = std::size_t{4} << 20;
constexpr std::size_t kAlign = 8;  // CUPTI requires 8-byte aligned activity buffers

const char* envValue(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// CUPTI's timestamps for GPU work are GPU times it interpolates into a CPU clock (by default
// CLOCK_REALTIME). Given this callback, it interpolates into the steady clock that the op ranges
// use. PIPESTUDIO_EXEC_CUPTI_CLOCK=cupti keeps CUPTI's own clock (for comparing on a GPU).
uint64_t CUPTIAPI steadyTimestamp() { return static_cast<uint64_t>(Clock::steadyNs()); }

struct State {
  const Clock* clock = nullptr;
  FrameSink* sink = nullptr;
  int fixedDevice = -1;  ///< >= 0: every record belongs to this trace device (the rank, on cuda)
  std::atomic<std::uint64_t> dropped{0};
  std::atomic<std::uint64_t> incomplete{0};
  bool started = false;
  std::mutex streamsMutex;
  std::map<std::uint32_t, int> streamDevice;  ///< CUPTI stream id → trace device (cuda-single lanes)
  ClockAnchors anchors;                       ///< CUPTI ns → ns since the clock's origin (guarded by streamsMutex)
  bool keepMarkers = false;                   ///< PIPESTUDIO_EXEC_KEEP_MARKERS: write the marker records too
};
State g_state;

void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* maxNumRecords) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *maxNumRecords = 0;
}

std::uint32_t cuptiStreamId(cudaStream_t stream) {
  std::uint32_t id = 0;
  if (cuptiGetStreamIdEx(nullptr, reinterpret_cast<CUstream>(stream), 0, &id) != CUPTI_SUCCESS) return 0;
  return id;
}

// A record kept until the event time of the marker before it is known (ClockAnchors.hpp).
struct Pending {
  trace::Activity activity;
  std::uint64_t cuptiStart = 0;
  std::uint64_t cuptiEnd = 0;
};
std::vector<Pending> g_pending;  // guarded by g_state.streamsMutex

// The fields memcpy and memset records share.
template <typename Record>
void readCopy(const Record& r, trace::Activity::Kind kind, const char* name, Pending& out) {
  trace::Activity& a = out.activity;
  a.kind = kind;
  a.device = static_cast<std::int32_t>(r.deviceId);
  a.stream = r.streamId;
  a.bytes = r.bytes;
  a.correlationId = r.correlationId;
  a.name = name;
  out.cuptiStart = r.start;
  out.cuptiEnd = r.end;
}

// Reads one record; false for kinds we do not trace and for records without timestamps (a
// record delivered before its work ended), which are counted as incomplete.
bool readRecord(const CUpti_Activity* record, Pending& out) {
  trace::Activity& a = out.activity;
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      a.name = k->name != nullptr ? k->name : "";
      // NCCL's device code is named ncclKernel_* / ncclDevKernel_*: reported as NCCL records.
      a.kind = a.name.rfind("nccl", 0) == 0 ? trace::Activity::Kind::Nccl : trace::Activity::Kind::Kernel;
      a.device = static_cast<std::int32_t>(k->deviceId);
      a.stream = k->streamId;
      a.correlationId = k->correlationId;
      out.cuptiStart = k->start;
      out.cuptiEnd = k->end;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      readCopy(*reinterpret_cast<const CUpti_ActivityMemcpy6*>(record), trace::Activity::Kind::Memcpy, "memcpy", out);
      break;
    case CUPTI_ACTIVITY_KIND_MEMSET:
      readCopy(*reinterpret_cast<const CUpti_ActivityMemset4*>(record), trace::Activity::Kind::Memset, "memset", out);
      break;
    default:
      return false;
  }
  if (out.cuptiStart == 0 || out.cuptiEnd == 0 || out.cuptiEnd < out.cuptiStart) {
    ++g_state.incomplete;
    return false;
  }
  if (g_state.fixedDevice >= 0) a.device = g_state.fixedDevice;
  return true;
}

// Converts and writes the pending records whose offset is known (all of them when `all`).
// Caller holds g_state.streamsMutex.
void writeReady(bool all) {
  std::size_t kept = 0;
  for (Pending& p : g_pending) {
    auto offset = g_state.anchors.offsetFor(p.activity.stream, p.cuptiStart);
    if (!offset && all) offset = g_state.anchors.fallback(p.cuptiStart);
    if (!offset) {
      g_pending[kept++] = std::move(p);
      continue;
    }
    // One offset for both ends: a record's duration is the GPU's own.
    trace::Activity& a = p.activity;
    a.startNs = static_cast<std::int64_t>(p.cuptiStart) + *offset;
    a.endNs = static_cast<std::int64_t>(p.cuptiEnd) + *offset;
    if (auto it = g_state.streamDevice.find(a.stream); it != g_state.streamDevice.end()) a.device = it->second;
    g_state.sink->write(a);
  }
  g_pending.resize(kept);
}

void CUPTIAPI bufferCompleted(CUcontext context, uint32_t streamId, uint8_t* buffer, size_t /*size*/,
                              size_t validSize) {
  CUpti_Activity* record = nullptr;
  {
    std::lock_guard lock(g_state.streamsMutex);
    while (validSize > 0 && cuptiActivityGetNextRecord(buffer, validSize, &record) == CUPTI_SUCCESS) {
      Pending p;
      if (!readRecord(record, p)) continue;
      if (p.activity.name == kClockMarkerKernel) {
        g_state.anchors.marker(p.activity.stream, p.cuptiEnd);
        if (!g_state.keepMarkers) continue;  // ours; PIPESTUDIO_EXEC_KEEP_MARKERS writes them too
      }
      g_pending.push_back(std::move(p));
    }
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(context, streamId, &dropped) == CUPTI_SUCCESS && dropped > 0) {
    g_state.dropped += dropped;
  }
  std::free(buffer);
}

Status checkCupti(CUptiResult rc, const char* what) {
  if (rc == CUPTI_SUCCESS) return {};
  const char* text = nullptr;
  cuptiGetResultString(rc, &text);
  return Error{std::string("CUPTI ") + what + ": " + (text != nullptr ? text : "unknown error")};
}

}  // namespace

void Cupti::resync() {
  std::uint64_t cuptiNs = 0;
  const std::int64_t before = Clock::steadyNs();
  if (cuptiGetTimestamp(&cuptiNs) != CUPTI_SUCCESS) return;
  const std::int64_t after = Clock::steadyNs();
  std::lock_guard lock(g_state.streamsMutex);
  g_state.anchors.setInitialOffset((before + after) / 2 - g_state.clock->originNs() -
                                   static_cast<std::int64_t>(cuptiNs));
}

Status Cupti::start(const Clock& clock, FrameSink& sink, int rankDevice) {
  g_state.clock = &clock;
  g_state.sink = &sink;
  g_state.fixedDevice = rankDevice;
  g_state.keepMarkers = envValue("PIPESTUDIO_EXEC_KEEP_MARKERS") != nullptr;
  const char* clockChoice = envValue("PIPESTUDIO_EXEC_CUPTI_CLOCK");
  if (clockChoice == nullptr || std::strcmp(clockChoice, "cupti") != 0) {
    if (auto st = checkCupti(cuptiActivityRegisterTimestampCallback(steadyTimestamp), "timestamp callback"); !st) {
      return st;
    }
  }
  resync();
  if (auto st = checkCupti(cuptiActivityRegisterCallbacks(bufferRequested, bufferCompleted), "register callbacks");
      !st) {
    return st;
  }
  for (auto kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET}) {
    PS_RETURN_IF_ERROR(checkCupti(cuptiActivityEnable(kind), "enable activity"));
  }
  g_state.started = true;
  return {};
}

void Cupti::mapStream(cudaStream_t stream, int device) {
  const std::uint32_t id = cuptiStreamId(stream);
  if (id == 0) return;
  std::lock_guard lock(g_state.streamsMutex);
  g_state.streamDevice[id] = device;
}

void Cupti::expectMarker(cudaStream_t stream, std::int64_t hostNs) {
  if (!g_state.started) return;
  const std::uint32_t id = cuptiStreamId(stream);
  std::lock_guard lock(g_state.streamsMutex);
  g_state.anchors.expect(id, hostNs);
}

// Not forced: a forced flush while other lanes still run hands over their records unfinished,
// without timestamps (seen with four cuda-single lanes on an H200). Those stay in their buffers
// until they complete; stop() forces the rest out after the device is synchronised.
void Cupti::flush() {
  if (!g_state.started) return;
  cuptiActivityFlushAll(0);
  std::lock_guard lock(g_state.streamsMutex);
  writeReady(false);
}

std::uint64_t Cupti::dropped() { return g_state.dropped.load() + g_state.incomplete.load(); }

void Cupti::stop() {
  if (!g_state.started) return;
  cudaDeviceSynchronize();
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  {
    std::lock_guard lock(g_state.streamsMutex);
    writeReady(true);
  }
  for (auto kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET}) {
    cuptiActivityDisable(kind);
  }
  g_state.started = false;
}

}  // namespace pipestudio::exec::cuda
