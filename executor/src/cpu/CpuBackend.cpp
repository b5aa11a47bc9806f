// CPU backend: one thread per device, real matrix work calibrated to the planned times,
// activations really allocated, transfers really copied between the device threads.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <new>
#include <unordered_map>

#include "../Backend.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/plan/Costs.hpp"

namespace pipestudio::exec {
namespace {

using Bytes = std::vector<std::byte>;

// A host buffer standing for `logicalBytes` of device memory; really holds logical × scale
// bytes, touched so that the pages exist.
struct HostBuffer {
  // new (std::nothrow) below: running out of host memory is an error message, not an exception.
  std::unique_ptr<std::byte[]> data;  // NOLINT(modernize-avoid-c-arrays)
  std::size_t realBytes = 0;
  std::int64_t logicalBytes = 0;
};

Expected<HostBuffer> allocateHost(std::int64_t logicalBytes, double scale) {
  HostBuffer b;
  b.logicalBytes = logicalBytes;
  b.realBytes = static_cast<std::size_t>(std::max<double>(0.0, static_cast<double>(logicalBytes) * scale));
  if (b.realBytes == 0) return b;
  b.data.reset(new (std::nothrow) std::byte[b.realBytes]);
  if (!b.data) return Error{"out of host memory allocating " + std::to_string(b.realBytes) + " bytes"};
  std::memset(b.data.get(), 1, b.realBytes);
  return b;
}

class CpuLane final : public Lane {
 public:
  CpuLane(const BackendContext& ctx, Mailbox& mailbox, int device, double unitMs, double memoryScale)
      : m_ctx(ctx), m_mailbox(mailbox), m_device(device), m_unitMs(unitMs), m_memoryScale(memoryScale) {}

  Status prepare() {
    const DeviceProgram& dp = m_ctx.program.perDevice[m_device];
    m_staticBytes = dp.staticBytes;
    // Parameters, gradients and the two Adam moments, as floats in the scaled footprint.
    const auto floats = static_cast<std::size_t>(std::max<double>(
        16.0, static_cast<double>(dp.staticBytes) * m_memoryScale / static_cast<double>(4 * sizeof(float))));
    try {
      m_params.assign(floats, 0.01F);
      m_grads.assign(floats, 0.001F);
      m_moment1.assign(floats, 0.0F);
      m_moment2.assign(floats, 0.0F);
    } catch (const std::bad_alloc&) {
      return Error{"device " + std::to_string(m_device) + ": out of host memory for " + std::to_string(dp.staticBytes) +
                   " bytes of parameters and optimizer state"};
    }
    return {};
  }

  int device() const override { return m_device; }

  Status exchange(std::span<const Transfer> sends, std::span<const Transfer> receives, int iteration) override {
    for (const Transfer& t : sends) {
      // A real copy of the producer's output into a message buffer; running out of host memory
      // is an error of this device, not an exception through the lane's thread (an abort).
      const auto size =
          static_cast<std::size_t>(std::max<double>(1.0, static_cast<double>(t.sizeBytes) * m_memoryScale));
      std::shared_ptr<Bytes> msg;
      try {
        msg = std::make_shared<Bytes>(size);
      } catch (const std::exception&) {
        return Error{"device " + std::to_string(m_device) + ": out of host memory for a transfer of " +
                     std::to_string(size) + " bytes to device " + std::to_string(t.toDevice)};
      }
      std::memset(msg->data(), static_cast<int>(t.producerOp & 0x7f), msg->size());
      m_mailbox.post(iteration, t, std::move(msg));
    }
    for (const Transfer& t : receives) {
      m_ctx.control.progress(m_device, LaneState::Waiting, t.fromDevice);
      auto payload = std::static_pointer_cast<Bytes>(m_mailbox.take(iteration, t));
      if (!payload) return Error{"aborted"};
      const std::int64_t start = m_ctx.clock.nowNs();
      m_inbox.resize(std::max(m_inbox.size(), payload->size()));
      std::memcpy(m_inbox.data(), payload->data(), payload->size());
      if (iteration >= 0) {
        const std::int64_t now = m_ctx.clock.nowNs();
        m_ctx.sink.write(trace::Activity{
            trace::Activity::Kind::Memcpy, m_device, 1, start, now, static_cast<std::uint64_t>(t.sizeBytes),
            static_cast<std::uint64_t>(t.producerOp), "recv from device " + std::to_string(t.fromDevice)});
      }
    }
    return {};
  }

  Status allocate(const BufferRef& buffer) override {
    auto b = allocateHost(buffer.sizeBytes, m_memoryScale);
    if (!b) return Error{"device " + std::to_string(m_device) + ": " + b.message()};
    m_inUse += buffer.sizeBytes;
    m_buffers[buffer.buffer] = std::move(*b);
    sampleMemory();
    return {};
  }

  Status release(const BufferRef& buffer) override {
    auto it = m_buffers.find(buffer.buffer);
    if (it == m_buffers.end()) return {};
    m_inUse -= it->second.logicalBytes;
    m_buffers.erase(it);
    sampleMemory();
    return {};
  }

  Status compute(const Step& step, int iteration, bool record) override {
    const std::int64_t start = m_ctx.clock.nowNs();
    if (record) {
      m_ctx.sink.write(
          trace::OpRange{true, m_device, step.virtualStage, step.kind, step.microbatch, iteration, start, start});
    }
    const double ms = step.plannedMs * m_ctx.timeScale;
    const auto units = static_cast<std::int64_t>(std::llround(ms / m_unitMs));
    volatile double sink = runGemmUnits(std::max<std::int64_t>(ms > 0 ? 1 : 0, units), nullptr);
    (void)sink;
    const std::int64_t end = m_ctx.clock.nowNs();
    if (record) {
      m_ctx.sink.write(
          trace::OpRange{false, m_device, step.virtualStage, step.kind, step.microbatch, iteration, start, end});
    }
    if (step.kind == OpKind::OPT) adam();
    m_end = end;
    return {};
  }

  Status optimizerStep(int iteration, bool record) override {
    const std::int64_t start = m_ctx.clock.nowNs();
    adam();
    const std::int64_t end = m_ctx.clock.nowNs();
    if (record) {
      m_ctx.sink.write(trace::OpRange{true, m_device, 0, OpKind::OPT, 0, iteration, start, start});
      m_ctx.sink.write(trace::OpRange{false, m_device, 0, OpKind::OPT, 0, iteration, start, end});
    }
    m_end = end;
    return {};
  }

  Status beginIteration(int /*iteration*/, bool /*record*/) override {
    m_start = m_ctx.clock.nowNs();
    m_end = m_start;
    sampleMemory();
    return {};
  }

  Status endIteration(int /*iteration*/, bool /*record*/) override {
    // Buffers the plan never frees (an F without backward) do not leak across iterations.
    m_buffers.clear();
    m_inUse = 0;
    sampleMemory();
    return {};
  }

  std::pair<std::int64_t, std::int64_t> iterationSpanNs() const override { return {m_start, m_end}; }

 private:
  // Adam (Kingma & Ba 2015, Algorithm 1) over the device's parameters.
  void adam() {
    constexpr float kBeta1 = 0.9F, kBeta2 = 0.999F, kLr = 1e-4F, kEps = 1e-8F;
    for (std::size_t i = 0; i < m_params.size(); ++i) {
      m_moment1[i] = kBeta1 * m_moment1[i] + (1 - kBeta1) * m_grads[i];
      m_moment2[i] = kBeta2 * m_moment2[i] + (1 - kBeta2) * m_grads[i] * m_grads[i];
      m_params[i] -= kLr * m_moment1[i] / (std::sqrt(m_moment2[i]) + kEps);
    }
  }

  void sampleMemory() {
    const std::int64_t total = m_staticBytes + m_inUse;
    m_ctx.sink.write(trace::MemorySample{m_device, m_ctx.clock.nowNs(), total, total});
  }

  const BackendContext& m_ctx;
  Mailbox& m_mailbox;
  int m_device;
  double m_unitMs;
  double m_memoryScale;
  std::int64_t m_staticBytes = 0;
  std::int64_t m_inUse = 0;
  std::unordered_map<std::int32_t, HostBuffer> m_buffers;
  Bytes m_inbox;
  std::vector<float> m_params, m_grads, m_moment1, m_moment2;
  std::int64_t m_start = 0;
  std::int64_t m_end = 0;
};

// The largest transfer a device sends or receives (nullptr: none).
const Transfer* largestTransfer(const DeviceProgram& dp) {
  const Transfer* largest = nullptr;
  auto consider = [&](const Transfer& t) {
    if (largest == nullptr || t.sizeBytes > largest->sizeBytes) largest = &t;
  };
  for (const Step& s : dp.steps) {
    for (const Transfer& t : s.sends) consider(t);
    for (const Transfer& t : s.receives) consider(t);
  }
  for (const Transfer& t : dp.endReceives) consider(t);
  return largest;
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendContext& ctx) : m_ctx(ctx), m_mailbox(ctx.control) {}

  Status prepare() {
    const ExecOptions& o = m_ctx.options;
    // Capacity the plan is checked against: the GPU of the cluster it was made for (or
    // --device-memory), so an out-of-memory plan is refused before the first op.
    std::int64_t peak = 0;
    std::int64_t transferPeak = 0;
    for (int d = 0; d < m_ctx.program.devices; ++d) {
      const DeviceProgram& dp = m_ctx.program.perDevice[d];
      const std::int64_t need = dp.staticBytes + dp.peakActivationBytes;
      peak = std::max(peak, need);
      const std::int64_t capacity = o.deviceMemoryBytes
                                        ? *o.deviceMemoryBytes
                                        : m_ctx.plan.config.memoryLimitBytes.value_or(
                                              deviceGpu(m_ctx.plan.cluster, m_ctx.plan.config, d).memoryBytes());
      if (capacity > 0 && need > capacity) {
        return Error{"device " + std::to_string(d) + ": out of memory: the plan needs " + std::to_string(need) +
                     " bytes (static " + std::to_string(dp.staticBytes) + " + activations " +
                     std::to_string(dp.peakActivationBytes) + "), the device has " + std::to_string(capacity)};
      }
      // A transfer's buffer is held whole on both devices: one larger than the device is refused
      // here, naming the op whose output it carries, rather than met as a failed allocation.
      if (const Transfer* t = largestTransfer(dp)) {
        if (capacity > 0 && t->sizeBytes > capacity) {
          return Error{"device " + std::to_string(d) + ": out of memory: the output of /ops/" +
                       std::to_string(t->producerOp) + " sent from device " + std::to_string(t->fromDevice) +
                       " to device " + std::to_string(t->toDevice) + " is " + std::to_string(t->sizeBytes) +
                       " bytes, more than the device's " + std::to_string(capacity) +
                       " (expected layer output_bytes that fit the GPU)"};
        }
        transferPeak = std::max(transferPeak, t->sizeBytes);
      }
    }
    // The largest transfer counts as well (its buffer exists next to the activations).
    peak = std::max(peak, transferPeak);
    const double scale = peak > o.cpuMemoryBudgetBytes && peak > 0
                             ? static_cast<double>(o.cpuMemoryBudgetBytes) / static_cast<double>(peak)
                             : 1.0;
    const double unitMs = calibrateGemmUnitMs();
    std::cerr << "pipestudio-exec: cpu backend, " << m_ctx.program.devices << " device thread(s), GEMM unit "
              << unitMs * 1000.0 << " us, memory scale " << scale << ", time scale " << m_ctx.timeScale << '\n';
    for (int d = 0; d < m_ctx.program.devices; ++d) {
      auto lane = std::make_unique<CpuLane>(m_ctx, m_mailbox, d, unitMs, scale);
      PS_RETURN_IF_ERROR(lane->prepare());
      m_lanes.push_back(std::move(lane));
    }
    return {};
  }

  std::vector<Lane*> lanes() override {
    std::vector<Lane*> out;
    for (auto& l : m_lanes) out.push_back(l.get());
    return out;
  }
  std::string deviceName() const override { return "cpu"; }

 private:
  const BackendContext& m_ctx;
  Mailbox m_mailbox;
  std::vector<std::unique_ptr<CpuLane>> m_lanes;
};

}  // namespace

Expected<std::unique_ptr<Backend>> makeCpuBackend(const BackendContext& ctx) {
  auto backend = std::make_unique<CpuBackend>(ctx);
  PS_RETURN_IF_ERROR(backend->prepare());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace pipestudio::exec
