// Renders the default workspace to PNG files under <build>/screenshots/ so a person can look
// at them: the window, the timeline zoomed in, the compare view.
#include <gtest/gtest.h>

#include <QComboBox>
#include <QDir>
#include <QImage>
#include <QPixmap>
#include <QSpinBox>
#include <QTabWidget>
#include <algorithm>
#include <set>

#include "MainWindow.hpp"
#include "QtTestApp.hpp"
#include "SolveController.hpp"
#include "pipestudio/viz/CompareView.hpp"
#include "pipestudio/viz/TimelineView.hpp"

namespace pipestudio::gui {
namespace {

/// Distinct colours in a downsampled image: a blank or single-colour render has very few.
int distinctColours(const QImage& image) {
  std::set<QRgb> colours;
  for (int y = 0; y < image.height(); y += 4) {
    for (int x = 0; x < image.width(); x += 4) colours.insert(image.pixel(x, y));
  }
  return static_cast<int>(colours.size());
}

TEST(Screenshots, DefaultWorkspace) {
  pipestudio::testing::qtApp();
  const QString dir = QStringLiteral(PIPESTUDIO_BINARY_DIR) + QStringLiteral("/screenshots");
  QDir().mkpath(dir);
  MainWindow window;
  window.resize(1600, 1000);
  window.show();
  ASSERT_TRUE(window.openDefaultWorkspace());
  ASSERT_TRUE(window.solveController()->waitForIdle(60000));
  ASSERT_TRUE(window.currentPlan()) << window.statusText().toStdString();
  QApplication::processEvents();
  window.timelineView()->plot()->replot(QCustomPlot::rpImmediateRefresh);

  const QImage full = window.grab().toImage();
  ASSERT_TRUE(full.save(dir + QStringLiteral("/window.png")));
  EXPECT_GT(distinctColours(full), 20);

  viz::TimelineView* timeline = window.timelineView();
  const QCPRange range = timeline->visibleRange();
  timeline->setVisibleRange(range.lower, range.lower + range.size() * 0.22);
  timeline->plot()->replot(QCustomPlot::rpImmediateRefresh);
  const QImage zoomed = timeline->grab().toImage();
  ASSERT_TRUE(zoomed.save(dir + QStringLiteral("/timeline-zoomed.png")));
  EXPECT_GT(distinctColours(zoomed), 10);

  window.pinBaseline();
  // Compare against the same workspace with half the microbatches per iteration.
  QSpinBox* microbatches = window.solverPanel().microbatches;
  microbatches->setValue(std::max(1, microbatches->value() / 2));
  window.solveNow();
  ASSERT_TRUE(window.solveController()->waitForIdle(60000));
  window.centralTabs()->setCurrentIndex(1);
  QApplication::processEvents();
  window.compareView()->plot()->replot(QCustomPlot::rpImmediateRefresh);
  const QImage compare = window.grab().toImage();
  ASSERT_TRUE(compare.save(dir + QStringLiteral("/compare.png")));
  EXPECT_GT(distinctColours(compare), 20);
}

}  // namespace
}  // namespace pipestudio::gui
