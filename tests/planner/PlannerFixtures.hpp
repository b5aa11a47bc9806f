#pragma once
// Models and clusters built in code for planner tests (measured costs, so times are exact), and
// the per-device extremes the oracles compare.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "pipestudio/model/Cluster.hpp"
#include "pipestudio/model/Model.hpp"
#include "pipestudio/planner/Planner.hpp"

namespace pipestudio::test {

inline ModelSpec equalLayers(int layers, double fMs, double bMs, double wMs, std::int64_t actBytes = 1000,
                             std::int64_t wgradBytes = 400, std::int64_t outputBytes = 100) {
  ModelSpec m;
  m.name = "equal";
  Component c;
  c.name = "backbone";
  for (int i = 0; i < layers; ++i) {
    Layer l;
    l.name = "l" + std::to_string(i);
    l.forwardMs = fMs;
    l.backwardInputMs = bMs;
    l.backwardWeightMs = wMs;
    l.activationBytes = actBytes;
    l.weightGradBytes = wgradBytes;
    l.parameterBytes = 1000;
    l.outputBytes = outputBytes;
    c.layers.push_back(l);
  }
  m.components.push_back(c);
  return m;
}

/// `gpus` devices on one node; bandwidth 0 and latency 0 make communication free.
inline ClusterSpec freeCluster(int gpus, double bandwidthGBps = 0, double latencyUs = 0) {
  ClusterSpec c;
  c.name = "test";
  c.gpu.name = "test-gpu";
  c.gpu.peakTflops = 100;
  c.gpu.memoryGib = 80;
  NodeSpec n;
  n.host = "localhost";
  n.gpus = gpus;
  c.nodes.push_back(n);
  c.intraNode = {bandwidthGBps, latencyUs};
  c.interNode = {bandwidthGBps, latencyUs};
  return c;
}

/// A model named `name` with one trainable component "backbone", no layers yet.
inline ModelSpec backboneModel(const std::string& name) {
  ModelSpec m;
  m.name = name;
  Component c;
  c.name = "backbone";
  m.components.push_back(std::move(c));
  return m;
}

/// A Llama-style block shape: SwiGLU MLP, no dropout.
inline TransformerShape swiGluShape(int hidden, int seq, int heads, int ffn) {
  TransformerShape t;
  t.hidden = hidden;
  t.seq = seq;
  t.heads = heads;
  t.ffn = ffn;
  t.mlp = MlpKind::SwiGlu;
  t.dropout = false;
  return t;
}

/// `shape` with a routed-expert MLP: `experts` experts of FFN width `expertFfn`, `topK` per token,
/// and `shared` shared experts.
inline TransformerShape withExperts(TransformerShape shape, std::int64_t experts, std::int64_t topK,
                                    std::int64_t expertFfn, std::int64_t shared = 0) {
  shape.experts = experts;
  shape.topK = topK;
  shape.expertFfn = expertFfn;
  shape.sharedExperts = shared;
  return shape;
}

/// `count` transformer layers "block.0", "block.1", … of shape `shape`, appended to `component`.
inline void addBlocks(Component& component, int count, const TransformerShape& shape) {
  for (int l = 0; l < count; ++l) {
    Layer layer;
    layer.name = "block." + std::to_string(l);
    layer.kind = "transformer";
    layer.transformer = shape;
    component.layers.push_back(layer);
  }
}

/// `gpus` devices on 2 GB/s links of 20 µs; with `twoNodes` (and more than one GPU) split over two
/// nodes joined at 0.5 GB/s and 50 µs, so transfers queue and links contend.
inline ClusterSpec slowCluster(int gpus, bool twoNodes) {
  ClusterSpec cluster = freeCluster(gpus, 2.0, 20);
  if (twoNodes && gpus > 1) {
    cluster.nodes[0].gpus = gpus / 2 + gpus % 2;
    NodeSpec second = cluster.nodes[0];
    second.host = "node2";
    second.gpus = gpus / 2;
    cluster.nodes.push_back(second);
    cluster.interNode = {0.5, 50};
  }
  return cluster;
}

inline PlanRequest request(const ModelSpec& model, const ClusterSpec& cluster, const std::string& schedule, int p,
                           int m, int chunks) {
  PlanRequest r;
  r.model = model;
  r.cluster = cluster;
  r.config.schedule = schedule;
  r.config.devices = p;
  r.config.microbatches = m;
  r.config.chunksPerDevice = chunks;
  r.config.partition = "uniform";  // the analytic oracles assume equal layer counts per stage
  return r;
}

/// The largest of a per-device figure over the devices (0 without devices), e.g.
/// worstOf(plan, [](const DeviceMetrics& d) { return d.busyMs; }).
template <class Figure>
auto worstOf(const Plan& plan, const Figure& figure) {
  decltype(figure(DeviceMetrics{})) worst{};
  for (const DeviceMetrics& d : plan.metrics.devices) worst = std::max(worst, figure(d));
  return worst;
}

/// The largest peak of activation bytes over the devices.
inline std::int64_t worstPeak(const Plan& plan) {
  return worstOf(plan, [](const DeviceMetrics& d) { return d.peakActivationBytes; });
}

/// The largest bubble over the devices (span − busy).
inline double worstBubble(const Plan& plan) {
  return worstOf(plan, [](const DeviceMetrics& d) { return d.spanMs - d.busyMs; });
}

/// The longest device span.
inline double longestSpan(const Plan& plan) {
  return worstOf(plan, [](const DeviceMetrics& d) { return d.spanMs; });
}

}  // namespace pipestudio::test
