#pragma once
// Models and clusters built in code for planner tests (measured costs, so times are exact).
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

}  // namespace pipestudio::test
