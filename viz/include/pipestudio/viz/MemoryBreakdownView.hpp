#pragma once
/// \file Per-device memory at its peak as a stacked bar (issue 13): one segment per line of the
/// breakdown (core/plan memoryParts: parameters, gradients, optimizer state, low-precision
/// weights, activations, buffers, workspaces, … and the margin a GPU keeps back), against the
/// GPU's capacity (or the plan's memory limit). The legend names the parts the plan has; hovering
/// a bar names every part.

#include <QWidget>
#include <array>
#include <memory>

#include "pipestudio/plan/Plan.hpp"
#include "pipestudio/viz/Qcp.hpp"

namespace pipestudio::viz {

class MemoryBreakdownView : public QWidget {
  Q_OBJECT
 public:
  static constexpr int kParts = static_cast<int>(kMemoryPartCount);
  /// Part names in stacking order (bottom first).
  static const std::array<const char*, kParts>& partNames();
  /// The parts of one device, bytes, in stacking order.
  static std::array<double, kParts> partsOf(const DeviceMetrics& device);

  explicit MemoryBreakdownView(QWidget* parent = nullptr);
  void setPlan(const std::shared_ptr<const Plan>& plan);
  /// The bars are of a plan that does not match the settings (the Metrics dock's "last good
  /// plan"): drawn faded and the axis says so, as the timeline dims its plan.
  void setDimmed(bool dimmed);
  bool dimmed() const { return m_dimmed; }
  QCustomPlot* plot() const { return m_plot; }
  /// Capacity each bar is drawn against (bytes; 0 when the plan has no GPU).
  std::int64_t capacityBytes() const { return m_capacityBytes; }
  /// Text for device `d` (the hover tooltip).
  QString describe(int device) const;
  int deviceCount() const { return static_cast<int>(m_devices.size()); }

 private:
  void onHover(QMouseEvent* event);
  QCustomPlot* m_plot = nullptr;
  std::array<QCPBars*, kParts> m_bars{};
  QCPItemStraightLine* m_capacity = nullptr;
  std::vector<DeviceMetrics> m_devices;
  std::int64_t m_capacityBytes = 0;
  bool m_dimmed = false;
};

}  // namespace pipestudio::viz
