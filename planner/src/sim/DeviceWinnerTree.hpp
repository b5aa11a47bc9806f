#pragma once
// The event structure of the simulator (Simulator.cpp).

#include <limits>

#include "pipestudio/common/Index.hpp"

namespace pipestudio {

// The pending events are the ends of the ops running now, at most one per device, so a
// winner tree over devices replaces a heap: the root names the device whose op ends first
// (ties: the lower device), and a device's change costs log2(devices) comparisons. Nodes
// hold the winner's key next to its device (no indirection) and are chosen without a
// branch: which child wins is data-dependent and mispredicts half the time.
class DeviceWinnerTree {
 public:
  explicit DeviceWinnerTree(int devices) {
    while (m_leaves < devices) m_leaves *= 2;
    m_nodes.resize(m_leaves * 2);
    for (int d = 0; d < m_leaves; ++d) m_nodes[m_leaves + d] = {kIdle, d};
    for (int i = m_leaves - 1; i >= 1; --i) m_nodes[i] = winner(i);
  }
  // The device whose running op ends first, or -1 when no device runs an op.
  int top() const { return m_nodes[1].keyMs == kIdle ? -1 : m_nodes[1].device; }
  double keyMs(int d) const { return m_nodes[m_leaves + d].keyMs; }
  void set(int d, double endMs) {
    m_nodes[m_leaves + d].keyMs = endMs;
    for (int i = (m_leaves + d) / 2; i >= 1; i /= 2) m_nodes[i] = winner(i);
  }
  void clear(int d) { set(d, kIdle); }

 private:
  static constexpr double kIdle = std::numeric_limits<double>::infinity();
  struct Node {
    double keyMs;
    int device;
  };
  // The left child holds the lower devices, so it wins ties.
  Node winner(int i) const {
    const Node& left = m_nodes[2 * i];
    const Node& right = m_nodes[2 * i + 1];
    return right.keyMs < left.keyMs ? right : left;
  }
  int m_leaves = 1;
  IdVector<Node> m_nodes;  // node i's children are 2i and 2i + 1; device d's leaf is m_leaves + d
};

}  // namespace pipestudio
