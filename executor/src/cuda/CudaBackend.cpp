// CUDA backends. `cuda`: one process per GPU, activations and gradients over NCCL
// point-to-point (one global communicator, non-blocking so that a dead peer can be aborted).
// `cuda-single`: every plan device in one process on one GPU, one stream each, transfers as
// device-to-device copies. Both drive lanes through the shared walkDevice loop.
#include <nccl.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "../Backend.hpp"
#include "Cuda.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/model/CostModel.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/Costs.hpp"

namespace pipestudio::exec {
namespace cuda {

Status check(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return {};
  return Error{std::string("CUDA ") + what + ": " + cudaGetErrorString(rc)};
}

Status check(cublasStatus_t rc, const char* what) {
  if (rc == CUBLAS_STATUS_SUCCESS) return {};
  return Error{std::string("cuBLAS ") + what + ": " + cublasGetStatusString(rc)};
}

namespace {

Status checkNccl(ncclResult_t rc, const char* what) {
  if (rc == ncclSuccess || rc == ncclInProgress) return {};
  return Error{std::string("NCCL ") + what + ": " + ncclGetErrorString(rc)};
}

// The reference GEMM of calibrated (time-only) work: 2048³ bf16, ~17 GFLOP.
constexpr Gemm kReference{2048, 2048, 2048, false};
constexpr std::int64_t kBf16 = 2;

// cuBLASLt's FP8 GEMMs want every dimension a multiple of 16.
constexpr std::int64_t kFp8Align = 16;
std::int64_t roundUp(std::int64_t v, std::int64_t to) { return (v + to - 1) / to * to; }
// 32 MiB: what cuBLAS documents as enough for Hopper's GEMM kernels.
constexpr std::size_t kLtWorkspaceBytes = std::size_t{32} << 20;

std::int64_t scratchElements(const Gemm& g) {
  const std::int64_t r = g.fp8 ? kFp8Align : 1;
  const std::int64_t m = roundUp(g.m, r), k = roundUp(g.k, r), n = roundUp(g.n, r);
  return std::max({m * k, k * n, m * n});
}

void addTransformer(const Layer& layer, std::int64_t samples, bool trainable, bool fp8, StageWork& w) {
  const TransformerShape& t = *layer.transformer;
  const std::int64_t tokens = std::max<std::int64_t>(1, samples * t.seq);
  const std::int64_t h = t.hidden;
  const std::int64_t ffn = t.ffn > 0 ? t.ffn : 4 * h;
  std::vector<Gemm> gemms;
  std::int64_t elementwise = tokens * h;
  if (layer.kind == "lm_head" && t.vocab) {
    gemms = {{tokens, h, *t.vocab, false}};
  } else if (layer.kind == "embedding" && t.vocab) {
    // A lookup: memory traffic only.
  } else {
    gemms = {{tokens, h, 3 * h, fp8}, {tokens, h, h, fp8}, {tokens, h, ffn, fp8}, {tokens, ffn, h, fp8}};
    elementwise = tokens * ffn;
  }
  auto add = [&](PassWork& p) {
    p.gemms.insert(p.gemms.end(), gemms.begin(), gemms.end());
    p.elementwise += elementwise;
  };
  add(w.forward);
  if (trainable) {
    add(w.backwardInput);
    add(w.backwardWeight);
  }
}

}  // namespace

std::vector<StageWork> buildStageWork(const Plan& plan) {
  std::vector<StageWork> out(plan.virtualStages.size());
  const CostedModel costs(plan);
  const bool fp8 = plan.config.precision != Precision::Bf16 && plan.config.precision != Precision::Fp16;
  for (std::size_t i = 0; i < plan.virtualStages.size(); ++i) {
    const VirtualStage& vs = plan.virtualStages[i];
    const Component& comp = plan.model.component(vs.component);
    for (int l = vs.firstLayer; l <= vs.lastLayer; ++l) {
      const Layer& layer = comp.layer(l);
      // Measured times win over shapes (CostModel.hpp): such layers are calibrated time.
      if (layer.transformer && !layer.forwardMs && layer.transformer->hidden > 0 && layer.transformer->seq > 0) {
        addTransformer(layer, plan.model.samplesPerMicrobatch, comp.trainable, fp8, out[i]);
        continue;
      }
      const LayerCosts& c = costs.layer(vs.component, l, vs.device);
      out[i].forward.calibratedMs += c.forwardMs;
      out[i].backwardInput.calibratedMs += c.backwardInputMs;
      out[i].backwardWeight.calibratedMs += c.backwardWeightMs;
    }
  }
  return out;
}

Status Workload::init(cudaStream_t stream, const std::vector<StageWork>& work) {
  m_stream = stream;
  std::int64_t elements = scratchElements(kReference);
  for (const StageWork& w : work) {
    for (const PassWork* p : {&w.forward, &w.backwardInput, &w.backwardWeight}) {
      for (const Gemm& g : p->gemms) {
        if (g.m > INT_MAX || g.k > INT_MAX || g.n > INT_MAX) return Error{"a layer's GEMM dimension exceeds INT_MAX"};
        elements = std::max(elements, scratchElements(g));
      }
      elements = std::max(elements, p->elementwise);
    }
  }
  m_scratchBytes = static_cast<std::size_t>(elements * kBf16);
  for (void*& s : m_scratch) {
    PS_RETURN_IF_ERROR(check(cudaMalloc(&s, m_scratchBytes), "allocating GEMM scratch"));
    PS_RETURN_IF_ERROR(check(cudaMemsetAsync(s, 0, m_scratchBytes, stream), "clearing GEMM scratch"));
  }
  PS_RETURN_IF_ERROR(check(cublasCreate(&m_cublas), "create"));
  PS_RETURN_IF_ERROR(check(cublasSetStream(m_cublas, stream), "set stream"));
  const bool anyFp8 = std::any_of(work.begin(), work.end(), [](const StageWork& w) {
    return std::any_of(w.forward.gemms.begin(), w.forward.gemms.end(), [](const Gemm& g) { return g.fp8; });
  });
  if (!anyFp8) return {};
  PS_RETURN_IF_ERROR(check(cublasLtCreate(&m_lt), "cuBLASLt create"));
  return check(cudaMalloc(&m_ltWorkspace, kLtWorkspaceBytes), "allocating the cuBLASLt workspace");
}

Workload::~Workload() {
  for (auto& [shape, g] : m_ltGemms) {
    cublasLtMatrixLayoutDestroy(g.a);
    cublasLtMatrixLayoutDestroy(g.b);
    cublasLtMatrixLayoutDestroy(g.d);
    cublasLtMatmulDescDestroy(g.desc);
  }
  if (m_lt != nullptr) cublasLtDestroy(m_lt);
  if (m_ltWorkspace != nullptr) cudaFree(m_ltWorkspace);
  if (m_cublas != nullptr) cublasDestroy(m_cublas);
  for (void* s : m_scratch) {
    if (s != nullptr) cudaFree(s);
  }
}

Status Workload::gemm(const Gemm& g, int variant) {
  if (g.fp8) return gemmFp8(g, variant);
  // Row-major operands in column-major cuBLAS: a row-major R×C matrix is its C×R transpose.
  // variant 0 (F)  Y[m×n]  = X[m×k]·W[k×n]
  // variant 1 (B)  dX[m×k] = dY[m×n]·Wᵀ
  // variant 2 (W)  dW[k×n] = Xᵀ·dY
  const float alpha = 1.0F, beta = 0.0F;
  const int m = static_cast<int>(g.m), k = static_cast<int>(g.k), n = static_cast<int>(g.n);
  void* x = m_scratch[0];
  void* w = m_scratch[1];
  void* y = m_scratch[2];
  cublasStatus_t rc = CUBLAS_STATUS_SUCCESS;
  switch (variant) {
    case 0:
      rc = cublasGemmEx(m_cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, w, CUDA_R_16BF, n, x, CUDA_R_16BF, k,
                        &beta, y, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      break;
    case 1:
      rc = cublasGemmEx(m_cublas, CUBLAS_OP_T, CUBLAS_OP_N, k, m, n, &alpha, w, CUDA_R_16BF, n, y, CUDA_R_16BF, n,
                        &beta, x, CUDA_R_16BF, k, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      break;
    default:
      rc = cublasGemmEx(m_cublas, CUBLAS_OP_N, CUBLAS_OP_T, n, k, m, &alpha, y, CUDA_R_16BF, n, x, CUDA_R_16BF, k,
                        &beta, w, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      break;
  }
  return check(rc, "GemmEx");
}

Expected<Workload::LtGemm*> Workload::ltGemm(int rows, int cols, int reduction) {
  const auto key = std::make_tuple(rows, cols, reduction);
  if (auto it = m_ltGemms.find(key); it != m_ltGemms.end()) return &it->second;
  LtGemm g;
  // D[rows×cols] = Aᵀ·B in column-major terms, A stored reduction×rows and B reduction×cols: the
  // "TN" layout Hopper's FP8 GEMMs require (cuBLAS docs, cublasLtMatmul, FP8 restrictions).
  const cublasOperation_t transA = CUBLAS_OP_T, transB = CUBLAS_OP_N;
  if (auto rc = cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F); rc != CUBLAS_STATUS_SUCCESS) {
    return Error{std::string("cuBLASLt FP8 matmul descriptor: ") + cublasGetStatusString(rc)};
  }
  cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transA, sizeof(transA));
  cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &transB, sizeof(transB));
  cublasLtMatrixLayoutCreate(&g.a, CUDA_R_8F_E4M3, static_cast<std::uint64_t>(reduction),
                             static_cast<std::uint64_t>(rows), reduction);
  cublasLtMatrixLayoutCreate(&g.b, CUDA_R_8F_E4M3, static_cast<std::uint64_t>(reduction),
                             static_cast<std::uint64_t>(cols), reduction);
  cublasLtMatrixLayoutCreate(&g.d, CUDA_R_16BF, static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols),
                             rows);
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulPreferenceCreate(&pref);
  const std::size_t workspace = kLtWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t rc = cublasLtMatmulAlgoGetHeuristic(m_lt, g.desc, g.a, g.b, g.d, g.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (rc != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatrixLayoutDestroy(g.a);
    cublasLtMatrixLayoutDestroy(g.b);
    cublasLtMatrixLayoutDestroy(g.d);
    cublasLtMatmulDescDestroy(g.desc);
    return Error{"FP8 GEMM " + std::to_string(rows) + "x" + std::to_string(cols) + "x" + std::to_string(reduction) +
                 ": cuBLASLt has no FP8 algorithm on this GPU (FP8 GEMMs need compute capability 8.9 or later)"};
  }
  g.algo = result.algo;
  return &(m_ltGemms[key] = g);
}

Status Workload::gemmFp8(const Gemm& g, int variant) {
  // The output and reduction of each variant (see gemm): F Y[m×n] over k, B dX[m×k] over n,
  // W dW[k×n] over m.
  std::int64_t rows = g.m, cols = g.n, reduction = g.k;
  if (variant == 1) {
    cols = g.k;
    reduction = g.n;
  } else if (variant == 2) {
    rows = g.k;
    reduction = g.m;
  }
  PS_ASSIGN_OR_RETURN(auto lt,
                      ltGemm(static_cast<int>(roundUp(rows, kFp8Align)), static_cast<int>(roundUp(cols, kFp8Align)),
                             static_cast<int>(roundUp(reduction, kFp8Align))));
  const float alpha = 1.0F, beta = 0.0F;
  return check(cublasLtMatmul(m_lt, lt->desc, &alpha, m_scratch[0], lt->a, m_scratch[1], lt->b, &beta, m_scratch[2],
                              lt->d, m_scratch[2], lt->d, &lt->algo, m_ltWorkspace, kLtWorkspaceBytes, m_stream),
               "FP8 matmul");
}

Expected<double> Workload::calibrate() {
  cudaEvent_t start = nullptr, stop = nullptr;
  PS_RETURN_IF_ERROR(check(cudaEventCreate(&start), "event"));
  PS_RETURN_IF_ERROR(check(cudaEventCreate(&stop), "event"));
  constexpr int kWarm = 5, kReps = 50;
  for (int i = 0; i < kWarm; ++i) {
    PS_RETURN_IF_ERROR(gemm(kReference, 0));
  }
  cudaEventRecord(start, m_stream);
  for (int i = 0; i < kReps; ++i) {
    PS_RETURN_IF_ERROR(gemm(kReference, 0));
  }
  cudaEventRecord(stop, m_stream);
  PS_RETURN_IF_ERROR(check(cudaEventSynchronize(stop), "calibration"));
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  m_referenceMs = std::max(1e-4, static_cast<double>(ms) / kReps);
  return m_referenceMs;
}

Status Workload::run(const PassWork& pass, int variant, double fraction, double timeScale) {
  for (const Gemm& g : pass.gemms) {
    Gemm scaled = g;
    scaled.m = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(static_cast<double>(g.m) * fraction)));
    PS_RETURN_IF_ERROR(gemm(scaled, variant));
  }
  const auto elements =
      std::min<std::int64_t>(static_cast<std::int64_t>(m_scratchBytes / kBf16),
                             static_cast<std::int64_t>(std::llround(static_cast<double>(pass.elementwise) * fraction)));
  if (auto st = check(launchElementwise(m_scratch[2], static_cast<std::size_t>(elements), m_stream), "elementwise");
      !st) {
    return st;
  }
  const auto count = static_cast<std::int64_t>(std::llround(pass.calibratedMs * fraction * timeScale / m_referenceMs));
  for (std::int64_t i = 0; i < count; ++i) {
    PS_RETURN_IF_ERROR(gemm(kReference, variant));
  }
  return {};
}

namespace {

// The work of one plan op (shared by the lanes, --baseline and --profile).
Status runOp(Workload& w, const StageWork& stage, OpKind kind, double fraction, double plannedMs, double timeScale) {
  PassWork calibrated;
  switch (kind) {
    case OpKind::F:
    case OpKind::N:
      return w.run(stage.forward, 0, fraction, timeScale);
    case OpKind::B:
      return w.run(stage.backwardInput, 1, fraction, timeScale);
    case OpKind::W:
      return w.run(stage.backwardWeight, 2, fraction, timeScale);
    case OpKind::BW:
      PS_RETURN_IF_ERROR(w.run(stage.backwardInput, 1, fraction, timeScale));
      return w.run(stage.backwardWeight, 2, fraction, timeScale);
    case OpKind::D2H:
    case OpKind::H2D:  // refused by the program compiler
      return {};
    case OpKind::S:
    case OpKind::T:
    case OpKind::OPT:
      // Vocabulary passes and listed optimizer steps: their planned time, calibrated.
      calibrated.calibratedMs = plannedMs;
      return w.run(calibrated, 0, 1.0, timeScale);
  }
  return {};
}

double fractionOf(const Plan& plan, std::int32_t samples) {
  return samples > 0 ? static_cast<double>(samples) /
                           static_cast<double>(std::max<std::int64_t>(1, plan.model.samplesPerMicrobatch))
                     : 1.0;
}

const char* envOf(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

struct DeviceMessage {
  void* data = nullptr;
  std::size_t bytes = 0;
  cudaEvent_t ready = nullptr;
};

// Adam state of a device: parameters, gradients and two moments, fp32. The static memory of
// the plan (Memory.hpp) is really allocated through these four arrays.
struct OptimizerState {
  float* block = nullptr;
  std::size_t count = 0;
  Status allocate(std::int64_t staticBytes, cudaStream_t stream) {
    count = static_cast<std::size_t>(std::max<std::int64_t>(1024, staticBytes / 16));
    if (auto st = check(cudaMalloc(reinterpret_cast<void**>(&block), count * 16), "allocating static memory"); !st) {
      return st;
    }
    return check(cudaMemsetAsync(block, 0, count * 16, stream), "clearing static memory");
  }
  Status step(cudaStream_t stream) {
    return check(launchAdam(block, block + count, block + 2 * count, block + 3 * count, count, stream), "adam");
  }
  ~OptimizerState() {
    if (block != nullptr) cudaFree(block);
  }
};

class CudaLane final : public Lane {
 public:
  CudaLane(const BackendContext& ctx, int device, int gpu, Mailbox* mailbox, ncclComm_t* comm)
      : m_ctx(ctx), m_device(device), m_gpu(gpu), m_mailbox(mailbox), m_comm(comm) {}

  ~CudaLane() override {
    cudaSetDevice(m_gpu);
    for (cudaEvent_t e : m_events) cudaEventDestroy(e);
    for (cudaEvent_t e : m_groupEvents) cudaEventDestroy(e);
    if (m_sendBuf != nullptr) cudaFree(m_sendBuf);
    if (m_recvBuf != nullptr) cudaFree(m_recvBuf);
  }
  CudaLane(const CudaLane&) = delete;
  CudaLane& operator=(const CudaLane&) = delete;

  Status prepare(const std::vector<StageWork>& work, double referenceMs) {
    m_stageWork = &work;
    PS_RETURN_IF_ERROR(check(cudaSetDevice(m_gpu), "set device"));
    PS_RETURN_IF_ERROR(check(cudaStreamCreateWithFlags(&m_compute, cudaStreamNonBlocking), "stream"));
    PS_RETURN_IF_ERROR(check(cudaStreamCreateWithFlags(&m_commStream, cudaStreamNonBlocking), "stream"));
    if (m_mailbox != nullptr) {
      Cupti::mapStream(m_compute, m_device);
      Cupti::mapStream(m_commStream, m_device);
    }
    PS_RETURN_IF_ERROR(m_work.init(m_compute, work));
    if (referenceMs > 0) {
      m_work.setReferenceMs(referenceMs);
    } else if (auto ms = m_work.calibrate(); !ms) {
      return ms.error();
    }
    const DeviceProgram& dp = program();
    // Events: begin/end per step, the optimizer step, the iteration reference and done.
    m_events.resize(2 * dp.steps.size() + 4);
    for (cudaEvent_t& e : m_events) {
      PS_RETURN_IF_ERROR(check(cudaEventCreate(&e), "event"));
    }
    std::size_t maxSend = 1, maxRecv = 1, groups = 1;
    auto account = [&](std::span<const Transfer> sends, std::span<const Transfer> receives) {
      std::size_t recv = 0;
      for (const Transfer& t : receives) recv += static_cast<std::size_t>(std::max<std::int64_t>(1, t.sizeBytes));
      for (const Transfer& t : sends) maxSend = std::max(maxSend, static_cast<std::size_t>(t.sizeBytes));
      maxRecv = std::max(maxRecv, recv);
    };
    for (const Step& s : dp.steps) {
      account(s.sends, s.receives);
      account(s.rendezvous.sends, s.rendezvous.receives);
      groups += s.rendezvous.empty() ? 0 : 1;
    }
    account(dp.trailing.sends, dp.trailing.receives);
    if (rendezvous()) {
      m_groupEvents.resize(groups);
      for (cudaEvent_t& e : m_groupEvents) {
        PS_RETURN_IF_ERROR(check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event"));
      }
    }
    PS_RETURN_IF_ERROR(check(cudaMalloc(&m_sendBuf, maxSend), "allocating send buffer"));
    PS_RETURN_IF_ERROR(check(cudaMalloc(&m_recvBuf, maxRecv), "allocating receive buffer"));
    PS_RETURN_IF_ERROR(m_optimizer.allocate(dp.staticBytes, m_compute));
    return check(cudaStreamSynchronize(m_compute), "prepare");
  }

  double referenceMs() const { return m_work.referenceMs(); }
  int device() const override { return m_device; }
  bool rendezvous() const override { return m_mailbox == nullptr; }

  Status exchange(std::span<const Transfer> sends, std::span<const Transfer> receives, int iteration) override {
    if (sends.empty() && receives.empty()) return {};
    // The peer this lane depends on now: what the watchdog blames if the exchange never ends.
    m_lastPeer = receives.empty() ? sends.back().toDevice : receives.back().fromDevice;
    m_ctx.control.setState(m_device, LaneState::Waiting, m_lastPeer);
    return m_mailbox != nullptr ? exchangeInProcess(sends, receives, iteration) : exchangeNccl(sends, receives);
  }

  Status allocate(const BufferRef& buffer) override {
    if (buffer.sizeBytes <= 0) return {};
    void* p = nullptr;
    if (auto st = check(cudaMallocAsync(&p, static_cast<std::size_t>(buffer.sizeBytes), m_compute),
                        "out of memory allocating activations");
        !st) {
      return Error{"device " + std::to_string(m_device) + ": " + st.message()};
    }
    m_buffers[buffer.buffer] = {p, buffer.sizeBytes};
    m_inUse += buffer.sizeBytes;
    m_memory.push_back({m_stepIndex, true, m_inUse});
    return {};
  }

  Status release(const BufferRef& buffer) override {
    auto it = m_buffers.find(buffer.buffer);
    if (it == m_buffers.end()) return {};
    cudaFreeAsync(it->second.first, m_compute);
    m_inUse -= it->second.second;
    m_buffers.erase(it);
    m_memory.push_back({m_stepIndex - 1, false, m_inUse});
    return {};
  }

  Status compute(const Step& step, int /*iteration*/, bool /*record*/) override {
    const auto i = static_cast<std::size_t>(m_stepIndex);
    if (rendezvous()) {
      // The op waits for the groups that delivered its inputs, not for every group posted so
      // far: a group may hold receives of later ops whose senders still need this op's output.
      int waited = -1;
      for (const Transfer& t : step.receives) {
        const auto it = m_receivedIn.find(transferKey(t));
        if (it == m_receivedIn.end()) {
          return Error{"device " + std::to_string(m_device) + ": internal: a receive of /ops/" +
                       std::to_string(t.consumerOp) + " was never posted"};
        }
        if (it->second > waited) waited = it->second;
      }
      if (waited >= 0) cudaStreamWaitEvent(m_compute, m_groupEvents[static_cast<std::size_t>(waited)], 0);
    }
    PS_RETURN_IF_ERROR(markClock(m_events[2 * i]));
    cudaEventRecord(m_events[2 * i], m_compute);
    const StageWork& work = (*m_stageWork)[static_cast<std::size_t>(step.virtualStage)];
    if (auto st = runOp(m_work, work, step.kind, fractionOf(m_ctx.plan, step.samples), step.plannedMs, m_ctx.timeScale);
        !st) {
      return st;
    }
    if (step.kind == OpKind::OPT) {
      PS_RETURN_IF_ERROR(m_optimizer.step(m_compute));
    }
    cudaEventRecord(m_events[2 * i + 1], m_compute);
    m_lastEnd = m_events[2 * i + 1];
    ++m_stepIndex;
    return check(cudaGetLastError(), "launch");
  }

  Status optimizerStep(int /*iteration*/, bool /*record*/) override {
    PS_RETURN_IF_ERROR(markClock(optBegin()));
    cudaEventRecord(optBegin(), m_compute);
    PS_RETURN_IF_ERROR(m_optimizer.step(m_compute));
    cudaEventRecord(optEnd(), m_compute);
    m_lastEnd = optEnd();
    m_ranOptimizer = true;
    return {};
  }

  Status beginIteration(int /*iteration*/, bool /*record*/) override {
    PS_RETURN_IF_ERROR(check(cudaSetDevice(m_gpu), "set device"));
    m_markedEvents.clear();
    PS_RETURN_IF_ERROR(markClock(reference()));
    cudaEventRecord(reference(), m_compute);
    PS_RETURN_IF_ERROR(check(cudaEventSynchronize(reference()), "iteration start"));
    m_referenceHostNs = m_ctx.clock.nowNs();
    m_stepIndex = 0;
    m_groupIndex = 0;
    m_receivedIn.clear();
    m_ranOptimizer = false;
    m_lastEnd = reference();
    m_memory.clear();
    return {};
  }

  Status endIteration(int iteration, bool record) override {
    // The iteration ends when its last transfers (the trailing sends) have been delivered.
    if (m_groupIndex > 0) cudaStreamWaitEvent(m_compute, m_groupEvents[m_groupIndex - 1], 0);
    for (auto& [id, buffer] : m_buffers) cudaFreeAsync(buffer.first, m_compute);
    m_buffers.clear();
    m_inUse = 0;
    cudaEventRecord(done(), m_compute);
    PS_RETURN_IF_ERROR(waitFor(done()));
    auto at = [&](cudaEvent_t e) {
      float ms = 0;
      cudaEventElapsedTime(&ms, reference(), e);
      return m_referenceHostNs + static_cast<std::int64_t>(static_cast<double>(ms) * 1e6);
    };
    const DeviceProgram& dp = program();
    m_span = {at(reference()), at(done())};
    if (!dp.steps.empty()) m_span.first = at(m_events[0]);
    // Every marker of this iteration, warm-up ones too, in launch order (ClockAnchors.hpp).
    for (cudaEvent_t e : m_markedEvents) Cupti::expectMarker(m_compute, at(e));
    m_markedEvents.clear();
    if (!record) {
      Cupti::flush();
      return {};
    }
    for (std::size_t i = 0; i < dp.steps.size(); ++i) {
      const Step& s = dp.steps[i];
      const std::int64_t b = at(m_events[2 * i]);
      const std::int64_t e = at(m_events[2 * i + 1]);
      m_ctx.sink.write(trace::OpRange{true, m_device, s.virtualStage, s.kind, s.microbatch, iteration, b, b});
      m_ctx.sink.write(trace::OpRange{false, m_device, s.virtualStage, s.kind, s.microbatch, iteration, b, e});
    }
    if (m_ranOptimizer) {
      const std::int64_t b = at(optBegin());
      m_ctx.sink.write(trace::OpRange{true, m_device, 0, OpKind::OPT, 0, iteration, b, b});
      m_ctx.sink.write(trace::OpRange{false, m_device, 0, OpKind::OPT, 0, iteration, b, at(optEnd())});
    }
    // Memory samples on the GPU timeline: allocations at their op's start, releases at its end.
    std::size_t freeBytes = 0, totalBytes = 0;
    cudaMemGetInfo(&freeBytes, &totalBytes);
    const auto reserved = static_cast<std::int64_t>(totalBytes - freeBytes);
    for (const MemoryChange& c : m_memory) {
      const auto i = static_cast<std::size_t>(std::max(0, c.step));
      if (i >= dp.steps.size()) continue;
      const std::int64_t t = at(m_events[2 * i + (c.atBegin ? 0 : 1)]);
      m_ctx.sink.write(trace::MemorySample{m_device, t, dp.staticBytes + c.inUse, reserved});
    }
    Cupti::flush();
    return {};
  }

  std::pair<std::int64_t, std::int64_t> iterationSpanNs() const override { return m_span; }

  /// Aborts the communicator from this lane's own thread (the only one that uses it).
  void abortComm() {
    std::call_once(m_abortOnce, [this] {
      if (m_comm != nullptr && *m_comm != nullptr) {
        std::cerr << "pipestudio-exec: rank " << m_device << ": aborting the NCCL communicator\n";
        ncclCommAbort(*m_comm);
        *m_comm = nullptr;
      }
    });
  }

 private:
  struct MemoryChange {
    std::int32_t step;
    bool atBegin;
    std::int64_t inUse;
  };

  const DeviceProgram& program() const { return m_ctx.program.perDevice[m_device]; }
  cudaEvent_t optBegin() const { return m_events[m_events.size() - 4]; }
  cudaEvent_t optEnd() const { return m_events[m_events.size() - 3]; }
  cudaEvent_t reference() const { return m_events[m_events.size() - 2]; }
  /// A clock marker on the compute stream right before `event` is recorded there: its CUPTI
  /// record puts the kernels that follow on this lane's event clock (ClockAnchors.hpp).
  Status markClock(cudaEvent_t event) {
    m_markedEvents.push_back(event);
    return check(launchClockMarker(m_compute), "clock marker");
  }
  cudaEvent_t done() const { return m_events[m_events.size() - 1]; }

  // Polls instead of blocking so that a dead peer (kernels that never finish) is noticed:
  // the watchdog fails the run, this thread aborts the communicator and returns.
  Status waitFor(cudaEvent_t event) {
    for (;;) {
      const cudaError_t rc = cudaEventQuery(event);
      if (rc == cudaSuccess) return {};
      if (rc != cudaErrorNotReady) return check(rc, "waiting for the GPU");
      PS_RETURN_IF_ERROR(pollComm());
      m_ctx.control.setState(m_device, LaneState::Waiting, m_lastPeer);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  Status pollComm() {
    if (m_ctx.control.aborted()) {
      abortComm();
      return Error{"aborted"};
    }
    if (m_comm == nullptr || *m_comm == nullptr) return {};
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(*m_comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      const std::string why = std::string("NCCL: ") + ncclGetErrorString(async);
      abortComm();
      return Error{why};
    }
    return {};
  }

  static std::int64_t transferKey(const Transfer& t) {
    return (std::int64_t{t.consumerOp} << 32) | static_cast<std::uint32_t>(t.producerOp);
  }

  // One rendezvous group of the program (Program.hpp: buildRendezvousGroups orders them so
  // that no two ranks wait on each other). Only a group that sends waits for the op before
  // it; receives are posted as early as the order allows.
  Status exchangeNccl(std::span<const Transfer> sends, std::span<const Transfer> receives) {
    if (m_groupIndex >= m_groupEvents.size()) {
      return Error{"device " + std::to_string(m_device) + ": internal: more NCCL groups than the program holds"};
    }
    if (!sends.empty()) cudaStreamWaitEvent(m_commStream, m_lastEnd, 0);
    ncclGroupStart();
    for (const Transfer& t : sends) {
      ncclSend(m_sendBuf, static_cast<std::size_t>(std::max<std::int64_t>(1, t.sizeBytes)), ncclInt8, t.toDevice,
               *m_comm, m_commStream);
    }
    std::size_t offset = 0;
    for (const Transfer& t : receives) {
      const auto bytes = static_cast<std::size_t>(std::max<std::int64_t>(1, t.sizeBytes));
      ncclRecv(static_cast<char*>(m_recvBuf) + offset, bytes, ncclInt8, t.fromDevice, *m_comm, m_commStream);
      offset += bytes;
    }
    ncclResult_t rc = ncclGroupEnd();
    // Non-blocking communicator: the group may still be in progress.
    while (rc == ncclInProgress) {
      PS_RETURN_IF_ERROR(pollComm());
      ncclCommGetAsyncError(*m_comm, &rc);
      if (rc == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    PS_RETURN_IF_ERROR(checkNccl(rc, "send/recv group"));
    const auto group = static_cast<int>(m_groupIndex);
    for (const Transfer& t : receives) m_receivedIn[transferKey(t)] = group;
    cudaEventRecord(m_groupEvents[m_groupIndex++], m_commStream);
    return {};
  }

  Status exchangeInProcess(std::span<const Transfer> sends, std::span<const Transfer> receives, int iteration) {
    for (const Transfer& t : sends) {
      auto msg = std::shared_ptr<DeviceMessage>(new DeviceMessage, [](DeviceMessage* m) { delete m; });
      msg->bytes = static_cast<std::size_t>(std::max<std::int64_t>(1, t.sizeBytes));
      if (auto st = check(cudaMallocAsync(&msg->data, msg->bytes, m_compute), "out of memory for a transfer"); !st) {
        return st;
      }
      cudaMemcpyAsync(msg->data, m_sendBuf, msg->bytes, cudaMemcpyDeviceToDevice, m_compute);
      cudaEventCreateWithFlags(&msg->ready, cudaEventDisableTiming);
      cudaEventRecord(msg->ready, m_compute);
      m_mailbox->post(iteration, t, msg);
    }
    std::size_t offset = 0;
    for (const Transfer& t : receives) {
      m_ctx.control.progress(m_device, LaneState::Waiting, t.fromDevice);
      auto msg = std::static_pointer_cast<DeviceMessage>(m_mailbox->take(iteration, t));
      if (!msg) return Error{"aborted"};
      cudaStreamWaitEvent(m_compute, msg->ready, 0);
      cudaMemcpyAsync(static_cast<char*>(m_recvBuf) + offset, msg->data, msg->bytes, cudaMemcpyDeviceToDevice,
                      m_compute);
      cudaFreeAsync(msg->data, m_compute);
      cudaEventDestroy(msg->ready);
      offset += msg->bytes;
    }
    return check(cudaGetLastError(), "transfer");
  }

  const BackendContext& m_ctx;
  int m_device;
  int m_gpu;
  Mailbox* m_mailbox;
  ncclComm_t* m_comm;
  cudaStream_t m_compute = nullptr;
  cudaStream_t m_commStream = nullptr;
  const std::vector<StageWork>* m_stageWork = nullptr;
  Workload m_work;
  OptimizerState m_optimizer;
  std::vector<cudaEvent_t> m_events;
  std::vector<cudaEvent_t> m_groupEvents;  ///< one per rendezvous group of the iteration
  std::size_t m_groupIndex = 0;
  std::unordered_map<std::int64_t, int> m_receivedIn;  ///< transfer → the group that received it
  cudaEvent_t m_lastEnd = nullptr;
  void* m_sendBuf = nullptr;
  void* m_recvBuf = nullptr;
  std::unordered_map<std::int32_t, std::pair<void*, std::int64_t>> m_buffers;
  std::int64_t m_inUse = 0;
  std::vector<MemoryChange> m_memory;
  std::int32_t m_stepIndex = 0;
  bool m_ranOptimizer = false;
  std::int64_t m_referenceHostNs = 0;
  std::vector<cudaEvent_t> m_markedEvents;  ///< events preceded by a clock marker, launch order
  std::pair<std::int64_t, std::int64_t> m_span{0, 0};
  int m_lastPeer = -1;
  std::once_flag m_abortOnce;
};

Expected<std::string> parseNcclIdHex(const std::string& hex) {
  if (hex.size() != 2 * NCCL_UNIQUE_ID_BYTES) {
    return Error{"--nccl-id: expected " + std::to_string(2 * NCCL_UNIQUE_ID_BYTES) + " hex digits, got " +
                 std::to_string(hex.size())};
  }
  std::string bytes;
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    auto digit = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return Error{"--nccl-id: not a hex string"};
    bytes += static_cast<char>(hi * 16 + lo);
  }
  return bytes;
}

Expected<int> usableGpus() {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) return Error{std::string("no usable CUDA GPU: cudaGetDeviceCount: ") + cudaGetErrorString(rc)};
  if (count == 0) return Error{"no usable CUDA GPU: cudaGetDeviceCount returned 0"};
  return count;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(const BackendContext& ctx, bool single) : m_ctx(ctx), m_single(single), m_mailbox(ctx.control) {}

  ~CudaBackend() override {
    m_lanes.clear();
    if (m_comm != nullptr) ncclCommDestroy(m_comm);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Status prepare() {
    PS_ASSIGN_OR_RETURN(auto gpus, usableGpus());
    const ExecOptions& o = m_ctx.options;
    int gpu = 0;
    if (!m_single) {
      // One GPU per rank of this node: the launcher's local rank, else the global rank.
      int local = o.rank;
      for (const char* var : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}) {
        if (const char* v = envOf(var)) {
          local = std::atoi(v);
          break;
        }
      }
      gpu = local % gpus;
      if (o.rank > 0 && envOf("NCCL_COMM_ID") == nullptr) {
        if (o.ncclIdHex.empty()) {
          return Error{"rank " + std::to_string(o.rank) +
                       " needs rank 0's NCCL id: pass --nccl-id HEX (from rank 0's stream) or set NCCL_COMM_ID"};
        }
        PS_ASSIGN_OR_RETURN(auto id, parseNcclIdHex(o.ncclIdHex));
        m_ncclId = id;
      }
    }
    PS_RETURN_IF_ERROR(check(cudaSetDevice(gpu), "set device"));
    cudaDeviceProp prop{};
    PS_RETURN_IF_ERROR(check(cudaGetDeviceProperties(&prop, gpu), "device properties"));
    m_deviceName = prop.name;
    m_stageWork = buildStageWork(m_ctx.plan);

    // Refuse what cannot fit before the first kernel: static + peak activations + buffers of
    // every device this process runs, against the GPU's free memory.
    std::size_t freeBytes = 0, totalBytes = 0;
    PS_RETURN_IF_ERROR(check(cudaMemGetInfo(&freeBytes, &totalBytes), "memory info"));
    std::vector<int> devices;
    if (m_single) {
      for (int d = 0; d < m_ctx.program.devices; ++d) devices.push_back(d);
    } else {
      devices.push_back(o.rank);
    }
    std::int64_t need = 0;
    for (int d : devices) {
      const DeviceProgram& dp = m_ctx.program.perDevice[d];
      need += dp.staticBytes + dp.peakActivationBytes;
    }
    if (o.deviceMemoryBytes)
      freeBytes = std::min<std::size_t>(freeBytes, static_cast<std::size_t>(*o.deviceMemoryBytes));
    if (need > static_cast<std::int64_t>(freeBytes)) {
      return Error{"out of memory: the plan needs " + std::to_string(need) + " bytes on GPU " + std::to_string(gpu) +
                   " (" + m_deviceName + ", static + peak activations of " + std::to_string(devices.size()) +
                   " device(s)), " + std::to_string(freeBytes) + " are free"};
    }
    if (auto st = Cupti::start(m_ctx.clock, m_ctx.sink, m_single ? -1 : o.rank); !st) {
      std::cerr << "pipestudio-exec: " << st.message() << " (continuing without kernel records)\n";
    }
    double referenceMs = 0;
    for (int d : devices) {
      auto lane =
          std::make_unique<CudaLane>(m_ctx, d, gpu, m_single ? &m_mailbox : nullptr, m_single ? nullptr : &m_comm);
      PS_RETURN_IF_ERROR(lane->prepare(m_stageWork, referenceMs));
      referenceMs = lane->referenceMs();
      m_lanes.push_back(std::move(lane));
    }
    std::cerr << "pipestudio-exec: " << name(m_single ? pipestudio::Backend::CudaSingle : pipestudio::Backend::Cuda)
              << " on GPU " << gpu << " (" << m_deviceName << "), " << devices.size()
              << " device lane(s), reference GEMM " << referenceMs << " ms\n";
    if (const Precision p = m_ctx.plan.config.precision;
        p == Precision::Fp8Block || p == Precision::Mxfp8 || p == Precision::Nvfp4) {
      std::cerr << "pipestudio-exec: note: the plan's " << precisionName(p)
                << " recipe runs its block GEMMs as per-tensor FP8 (E4M3): the executor has no block-scaled GEMMs\n";
    }
    return {};
  }

  Status afterHeader() override {
    if (m_single) return {};
    const ExecOptions& o = m_ctx.options;
    ncclUniqueId id{};
    if (envOf("NCCL_COMM_ID") != nullptr || o.rank == 0) {
      // With NCCL_COMM_ID every rank derives the same id from the address it names.
      PS_RETURN_IF_ERROR(checkNccl(ncclGetUniqueId(&id), "get unique id"));
      if (o.rank == 0) m_ctx.sink.write(trace::NcclId{std::string(id.internal, NCCL_UNIQUE_ID_BYTES)});
    } else {
      std::copy(m_ncclId.begin(), m_ncclId.end(), id.internal);
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every call returns; a dead peer is then noticed and aborted
    PS_RETURN_IF_ERROR(checkNccl(ncclCommInitRankConfig(&m_comm, o.world, id, o.rank, &config), "init"));
    const auto deadline = Clock::steadyNs() + static_cast<std::int64_t>(o.watchdogTimeoutS * 1e9);
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
      ncclCommGetAsyncError(m_comm, &state);
      if (state != ncclInProgress) break;
      if (Clock::steadyNs() > deadline) {
        ncclCommAbort(m_comm);
        m_comm = nullptr;
        return Error{"NCCL init: not every rank joined within " + std::to_string(static_cast<int>(o.watchdogTimeoutS)) +
                     " s (a rank died or never started)"};
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return checkNccl(state, "init");
  }

  std::vector<Lane*> lanes() override {
    std::vector<Lane*> out;
    for (auto& l : m_lanes) out.push_back(l.get());
    return out;
  }
  std::string deviceName() const override { return m_deviceName; }

  std::uint64_t finish() override {
    Cupti::stop();
    return Cupti::dropped();
  }

 private:
  const BackendContext& m_ctx;
  bool m_single;
  Mailbox m_mailbox;
  ncclComm_t m_comm = nullptr;
  std::string m_ncclId;
  std::string m_deviceName;
  std::vector<StageWork> m_stageWork;
  std::vector<std::unique_ptr<CudaLane>> m_lanes;
};

}  // namespace
}  // namespace cuda

Expected<std::unique_ptr<Backend>> makeCudaBackend(const BackendContext& ctx, bool single) {
  auto backend = std::make_unique<cuda::CudaBackend>(ctx, single);
  PS_RETURN_IF_ERROR(backend->prepare());
  return std::unique_ptr<Backend>(std::move(backend));
}

Status profileModel(const Plan& plan, const ExecOptions& options) {
  using namespace cuda;
  PS_RETURN_IF_ERROR(usableGpus());
  PS_RETURN_IF_ERROR(check(cudaSetDevice(0), "set device"));
  // One virtual stage per layer, so that every layer is measured on its own.
  Plan perLayer = plan;
  perLayer.virtualStages.clear();
  for (std::size_t c = 0; c < plan.model.components.size(); ++c) {
    for (std::size_t l = 0; l < plan.model.components[c].layers.size(); ++l) {
      perLayer.virtualStages.push_back(VirtualStage{static_cast<int>(perLayer.virtualStages.size()), 0, 0,
                                                    static_cast<int>(c), static_cast<int>(l), static_cast<int>(l), 0});
    }
  }
  const auto work = buildStageWork(perLayer);
  cudaStream_t stream = nullptr;
  PS_RETURN_IF_ERROR(check(cudaStreamCreate(&stream), "stream"));
  Workload w;
  PS_RETURN_IF_ERROR(w.init(stream, work));
  PS_RETURN_IF_ERROR(w.calibrate());
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  // Median of 7 timed runs after 2 warm-ups.
  auto timeOf = [&](OpKind kind, const StageWork& sw) -> Expected<double> {
    std::vector<double> samples;
    for (int r = 0; r < 9; ++r) {
      cudaEventRecord(start, stream);
      PS_RETURN_IF_ERROR(runOp(w, sw, kind, 1.0, 0.0, 1.0));
      cudaEventRecord(stop, stream);
      PS_RETURN_IF_ERROR(check(cudaEventSynchronize(stop), "profile"));
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      if (r >= 2) samples.push_back(ms);
    }
    std::sort(samples.begin(), samples.end());
    return samples[samples.size() / 2];
  };
  ModelSpec measured = plan.model;
  std::size_t index = 0;
  // Each layer runs whole on one GPU: its shape costs without tensor or other parallelism.
  const CostedModel unsplit(plan.model, plan.cluster, PlanConfig{});
  for (int c = 0; c < static_cast<int>(measured.components.size()); ++c) {
    Component& comp = measured.component(c);
    for (int l = 0; l < static_cast<int>(comp.layers.size()); ++l) {
      Layer& layer = comp.layer(l);
      const StageWork& sw = work[index++];
      const LayerCosts& costs = unsplit.layer(c, l, 0);
      PS_ASSIGN_OR_RETURN(auto f, timeOf(OpKind::F, sw));
      layer.forwardMs = f;
      if (comp.trainable) {
        PS_ASSIGN_OR_RETURN(auto b, timeOf(OpKind::B, sw));
        PS_ASSIGN_OR_RETURN(auto wt, timeOf(OpKind::W, sw));
        layer.backwardInputMs = b;
        layer.backwardWeightMs = wt;
        layer.weightGradBytes = costs.weightGradBytes;
      }
      // Memory: the executor holds exactly the activation convention's bytes per layer.
      layer.activationBytes = costs.activationBytes;
      layer.parameterBytes = costs.parameterBytes;
      layer.outputBytes = costs.outputBytes;
      std::cerr << "pipestudio-exec: profile " << comp.name << "/" << layer.name << ": F " << *layer.forwardMs
                << " ms, B " << layer.backwardInputMs.value_or(0) << " ms, W " << layer.backwardWeightMs.value_or(0)
                << " ms\n";
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  measured.name = plan.model.name + " (measured)";
  return saveJsonFile(*options.profileOut, modelToJson(measured));
}

Expected<double> runBaseline(const Plan& plan, const ExecOptions& /*options*/, double timeScale) {
  using namespace cuda;
  PS_RETURN_IF_ERROR(usableGpus());
  PS_RETURN_IF_ERROR(check(cudaSetDevice(0), "set device"));
  PS_ASSIGN_OR_RETURN(auto program, compileProgram(plan));
  const auto work = buildStageWork(plan);
  cudaStream_t stream = nullptr;
  PS_RETURN_IF_ERROR(check(cudaStreamCreate(&stream), "stream"));
  Workload w;
  PS_RETURN_IF_ERROR(w.init(stream, work));
  PS_RETURN_IF_ERROR(w.calibrate());
  IdVector<std::unique_ptr<OptimizerState>> optimizers;  // by device
  for (const DeviceProgram& dp : program.perDevice) {
    optimizers.push_back(std::make_unique<OptimizerState>());
    PS_RETURN_IF_ERROR(optimizers.back()->allocate(dp.staticBytes, stream));
  }
  // Every op's kernels back to back, no events, transfers or allocations between them.
  auto pass = [&]() -> Status {
    for (int d = 0; d < program.perDevice.size(); ++d) {
      for (const Step& s : program.perDevice[d].steps) {
        if (auto st = runOp(w, work[static_cast<std::size_t>(s.virtualStage)], s.kind, fractionOf(plan, s.samples),
                            s.plannedMs, timeScale);
            !st) {
          return st;
        }
        if (s.kind == OpKind::OPT) {
          PS_RETURN_IF_ERROR(optimizers[d]->step(stream));
        }
      }
      if (!program.perDevice[d].hasOptimizerStep) {
        PS_RETURN_IF_ERROR(optimizers[d]->step(stream));
      }
    }
    return {};
  };
  // As the measured run has warm-up iterations, so does the reference: 2 passes untimed (cuBLAS
  // picks its kernels, modules load), then the median of 5 (a single cold pass was seen 3 %
  // slower than the run it is the reference of, on an H200).
  constexpr int kWarmup = 2, kTimed = 5;
  for (int i = 0; i < kWarmup; ++i) {
    PS_RETURN_IF_ERROR(pass());
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> times;
  for (int i = 0; i < kTimed; ++i) {
    cudaEventRecord(start, stream);
    PS_RETURN_IF_ERROR(pass());
    cudaEventRecord(stop, stream);
    PS_RETURN_IF_ERROR(check(cudaEventSynchronize(stop), "baseline"));
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(static_cast<double>(ms));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  std::nth_element(times.begin(), times.begin() + kTimed / 2, times.end());
  return times[kTimed / 2];
}

}  // namespace pipestudio::exec
