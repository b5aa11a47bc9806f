// CUPTI Activity API: asynchronous buffers of kernel, memcpy and memset records, delivered to
// the completion callback, converted to the host clock and written as trace frames.
#include <cuda.h>
#include <cupti.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>

#include "Cuda.hpp"

namespace pipestudio::exec::cuda {
namespace {

// 4 MiB per buffer: a few thousand records, flushed at least once per iteration.
constexpr std::size_t kBufferBytes = std::size_t{4} << 20;
constexpr std::size_t kAlign = 8;  // CUPTI requires 8-byte aligned activity buffers

struct State {
  const Clock* clock = nullptr;
  FrameSink* sink = nullptr;
  int fixedDevice = -1;                   ///< >= 0: every record belongs to this trace device (the rank, on cuda)
  std::atomic<std::int64_t> offsetNs{0};  ///< host steady ns − CUPTI ns
  std::atomic<std::uint64_t> dropped{0};
  bool started = false;
  std::mutex streamsMutex;
  std::map<std::uint32_t, int> streamDevice;  ///< CUPTI stream id → trace device (cuda-single lanes)
};
State g_state;

void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* maxNumRecords) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *maxNumRecords = 0;
}

std::int64_t toHost(std::uint64_t cuptiNs) {
  return static_cast<std::int64_t>(cuptiNs) + g_state.offsetNs.load() - g_state.clock->originNs();
}

void CUPTIAPI bufferCompleted(CUcontext context, uint32_t streamId, uint8_t* buffer, size_t /*size*/,
                              size_t validSize) {
  CUpti_Activity* record = nullptr;
  while (validSize > 0 && cuptiActivityGetNextRecord(buffer, validSize, &record) == CUPTI_SUCCESS) {
    trace::Activity a;
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        a.name = k->name != nullptr ? k->name : "";
        // NCCL's device code is named ncclKernel_* / ncclDevKernel_*: reported as NCCL records.
        a.kind = a.name.rfind("nccl", 0) == 0 ? trace::Activity::Kind::Nccl : trace::Activity::Kind::Kernel;
        a.device = static_cast<std::int32_t>(k->deviceId);
        a.stream = k->streamId;
        a.startNs = toHost(k->start);
        a.endNs = toHost(k->end);
        a.correlationId = k->correlationId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        a.kind = trace::Activity::Kind::Memcpy;
        a.device = static_cast<std::int32_t>(m->deviceId);
        a.stream = m->streamId;
        a.startNs = toHost(m->start);
        a.endNs = toHost(m->end);
        a.bytes = m->bytes;
        a.correlationId = m->correlationId;
        a.name = "memcpy";
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        a.kind = trace::Activity::Kind::Memset;
        a.device = static_cast<std::int32_t>(m->deviceId);
        a.stream = m->streamId;
        a.startNs = toHost(m->start);
        a.endNs = toHost(m->end);
        a.bytes = m->bytes;
        a.correlationId = m->correlationId;
        a.name = "memset";
        break;
      }
      default:
        continue;
    }
    if (g_state.fixedDevice >= 0) a.device = g_state.fixedDevice;
    {
      std::lock_guard lock(g_state.streamsMutex);
      if (auto it = g_state.streamDevice.find(a.stream); it != g_state.streamDevice.end()) a.device = it->second;
    }
    g_state.sink->write(a);
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
  g_state.offsetNs.store((before + after) / 2 - static_cast<std::int64_t>(cuptiNs));
}

Status Cupti::start(const Clock& clock, FrameSink& sink, int rankDevice) {
  g_state.clock = &clock;
  g_state.sink = &sink;
  g_state.fixedDevice = rankDevice;
  resync();
  if (auto st = checkCupti(cuptiActivityRegisterCallbacks(bufferRequested, bufferCompleted), "register callbacks");
      !st) {
    return st;
  }
  for (auto kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET}) {
    if (auto st = checkCupti(cuptiActivityEnable(kind), "enable activity"); !st) return st;
  }
  g_state.started = true;
  return {};
}

void Cupti::mapStream(cudaStream_t stream, int device) {
  std::uint32_t id = 0;
  if (cuptiGetStreamIdEx(nullptr, reinterpret_cast<CUstream>(stream), 0, &id) != CUPTI_SUCCESS) return;
  std::lock_guard lock(g_state.streamsMutex);
  g_state.streamDevice[id] = device;
}

void Cupti::flush() {
  if (g_state.started) cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

std::uint64_t Cupti::dropped() { return g_state.dropped.load(); }

void Cupti::stop() {
  if (!g_state.started) return;
  flush();
  for (auto kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET}) {
    cuptiActivityDisable(kind);
  }
  g_state.started = false;
}

}  // namespace pipestudio::exec::cuda
