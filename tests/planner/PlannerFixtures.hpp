#pragma once
// Models and clusters built in code for planner tests (measured costs, so times are exact), and
// the per-device extremes the oracles compare.
#include <algorithm>
#include <cstdint>
#include <string>

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

/// The largest peak of activation bytes over the devices.
inline std::int64_t worstPeak(const Plan& plan) {
  std::int64_t worst = 0;
  for (const auto& d : plan.metrics.devices) worst = std::max(worst, d.peakActivationBytes);
  return worst;
}

/// The largest bubble over the devices (span − busy).
inline double worstBubble(const Plan& plan) {
  double worst = 0;
  for (const auto& d : plan.metrics.devices) worst = std::max(worst, d.spanMs - d.busyMs);
  return worst;
}

/// The longest device span.
inline double longestSpan(const Plan& plan) {
  double worst = 0;
  for (const auto& d : plan.metrics.devices) worst = std::max(worst, d.spanMs);
  return worst;
}

}  // namespace pipestudio::test
