#pragma once
// The event structure of the simulator (Simulator.cpp).

#include <limits>
#include <vector>

namespace pipestudio {

// The pending events are the ends of the ops running now, at most one per device, so a
// winner tree over devices replaces a heap: the root names the device whose op ends first
// (ties: the lower device), and a device's change costs log2(devices) comparisons.
class DeviceWinnerTree {
 public:
  explicit DeviceWinnerTree(int devices) {
    while (m_leaves < devices) m_leaves *= 2;
    m_keyMs.assign(static_cast<std::size_t>(m_leaves), kIdle);
    m_tree.resize(static_cast<std::size_t>(m_leaves) * 2);
    for (int d = 0; d < m_leaves; ++d) m_tree[static_cast<std::size_t>(m_leaves + d)] = d;
    for (int i = m_leaves - 1; i >= 1; --i) m_tree[static_cast<std::size_t>(i)] = winner(2 * i, 2 * i + 1);
  }
  // The device whose running op ends first, or -1 when no device runs an op.
  int top() const {
    const int d = m_tree[1];
    return m_keyMs[static_cast<std::size_t>(d)] == kIdle ? -1 : d;
  }
  double keyMs(int d) const { return m_keyMs[static_cast<std::size_t>(d)]; }
  void set(int d, double endMs) { m_keyMs[static_cast<std::size_t>(d)] = endMs; fix(d); }
  void clear(int d) { set(d, kIdle); }

 private:
  static constexpr double kIdle = std::numeric_limits<double>::infinity();
  int winner(int a, int b) const {
    const int x = m_tree[static_cast<std::size_t>(a)];
    const int y = m_tree[static_cast<std::size_t>(b)];
    return m_keyMs[static_cast<std::size_t>(y)] < m_keyMs[static_cast<std::size_t>(x)] ? y : x;  // x < y
  }
  void fix(int d) {
    for (int i = (m_leaves + d) / 2; i >= 1; i /= 2) m_tree[static_cast<std::size_t>(i)] = winner(2 * i, 2 * i + 1);
  }
  int m_leaves = 1;
  std::vector<double> m_keyMs;
  std::vector<int> m_tree;
};

}  // namespace pipestudio
