#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QTest>
#include <QWheelEvent>

#include "QtTestApp.hpp"
#include "SyntheticPlan.hpp"
#include "pipestudio/viz/CompareView.hpp"
#include "pipestudio/viz/MetricsModel.hpp"
#include "pipestudio/viz/TimelinePlottable.hpp"
#include "pipestudio/viz/TimelineView.hpp"

namespace pipestudio::viz {
namespace {

using testing::syntheticPlan;

class TimelineViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pipestudio::testing::qtApp();
    view = std::make_unique<TimelineView>();
    view->resize(1200, 700);
    view->show();  // lays the plot out at its real size (offscreen platform)
    QApplication::processEvents();
    plan = std::make_shared<const Plan>(syntheticPlan(4, 16));
    view->setPlan(plan);
    view->plot()->replot(QCustomPlot::rpImmediateRefresh);
  }
  /// Centre pixel of an op computed from the axes (independently of the plottable).
  QPointF centreOf(int op) const {
    const Op& o = plan->ops[static_cast<std::size_t>(op)];
    QCPAxis* key = view->timelineRect()->axis(QCPAxis::atBottom);
    QCPAxis* value = view->timelineRect()->axis(QCPAxis::atLeft);
    const Lane& lane = view->timeline()->lanes()[static_cast<std::size_t>(view->timeline()->laneOf({ItemRef::Kind::Op, op}))];
    return {key->coordToPixel(0.5 * (o.startMs + o.endMs)), value->coordToPixel(0.5 * (lane.valueLo + lane.valueHi))};
  }
  std::unique_ptr<TimelineView> view;
  std::shared_ptr<const Plan> plan;
};

TEST_F(TimelineViewTest, HitTestReturnsTheOpUnderThePixel) {
  TimelinePlottable* t = view->plottable();
  int checked = 0;
  for (std::size_t i = 0; i < plan->ops.size(); i += 7) {
    const QPointF p = centreOf(static_cast<int>(i));
    const ItemRef ref = t->itemAt(p, 0.0);
    ASSERT_EQ(ref.kind, ItemRef::Kind::Op) << "op " << i << " at " << p.x() << "," << p.y();
    EXPECT_EQ(ref.index, static_cast<int>(i));
    QVariant details;
    EXPECT_EQ(t->selectTest(p, false, &details), 0.0);
    EXPECT_TRUE(details.isValid());
    ++checked;
  }
  EXPECT_GT(checked, 5);
  // The axis area left of the plot and the gap between devices hit nothing.
  EXPECT_FALSE(t->itemAt(QPointF(2, 100)).valid());
  QCPAxis* value = view->timelineRect()->axis(QCPAxis::atLeft);
  QCPAxis* key = view->timelineRect()->axis(QCPAxis::atBottom);
  EXPECT_FALSE(t->itemAt(QPointF(key->coordToPixel(3.0), value->coordToPixel(1.97)), 0.0).valid());
  EXPECT_LT(t->selectTest(QPointF(2, 100), false), 0.0);
}

TEST_F(TimelineViewTest, ClickSelectsTheOpAndItsChain) {
  const int op = 20;
  const QPointF p = centreOf(op);
  QTest::mouseClick(view->plot(), Qt::LeftButton, Qt::NoModifier, p.toPoint());
  EXPECT_EQ(view->selectedOp(), op);
  EXPECT_FALSE(view->overlay()->chain().empty());
  EXPECT_FALSE(view->overlay()->criticalPath().empty());
  QTest::keyClick(view.get(), Qt::Key_Escape);
  EXPECT_EQ(view->selectedOp(), -1);
}

TEST_F(TimelineViewTest, ZoomAndPanKeepBothPlotsOnOneTimeAxis) {
  auto memoryRange = [&] { return view->memoryRect()->axis(QCPAxis::atBottom)->range(); };
  const QCPRange full = view->visibleRange();
  EXPECT_DOUBLE_EQ(full.lower, memoryRange().lower);
  EXPECT_DOUBLE_EQ(full.upper, memoryRange().upper);

  view->zoom(0.5, full.center());
  QCPRange r = view->visibleRange();
  EXPECT_NEAR(r.size(), full.size() * 0.5, 1e-9);
  EXPECT_NEAR(r.center(), full.center(), 1e-9);
  EXPECT_DOUBLE_EQ(r.lower, memoryRange().lower);
  EXPECT_DOUBLE_EQ(r.upper, memoryRange().upper);

  view->pan(1.0);
  const QCPRange panned = view->visibleRange();
  EXPECT_NEAR(panned.lower, r.lower + 1.0, 1e-9);
  EXPECT_NEAR(panned.size(), r.size(), 1e-9);
  EXPECT_DOUBLE_EQ(panned.lower, memoryRange().lower);

  // Zooming on the memory plot moves the timeline too.
  view->memoryRect()->axis(QCPAxis::atBottom)->setRange(2.0, 6.0);
  EXPECT_DOUBLE_EQ(view->visibleRange().lower, 2.0);
  EXPECT_DOUBLE_EQ(view->visibleRange().upper, 6.0);

  // Panning far past the end is clamped to the plan (plus a margin); the width is kept.
  view->pan(1e6);
  const QCPRange clamped = view->visibleRange();
  EXPECT_NEAR(clamped.size(), 4.0, 1e-9);
  EXPECT_LE(clamped.upper, view->timeline()->endMs() * 1.06);

  // A mouse wheel over the plot zooms about the cursor, on both plots.
  view->fitToView();
  const QCPRange before = view->visibleRange();
  const QPointF at(view->timelineRect()->center());
  QWheelEvent wheel(at, view->plot()->mapToGlobal(at.toPoint()), QPoint(), QPoint(0, 120), Qt::NoButton,
                    Qt::NoModifier, Qt::NoScrollPhase, false);
  QApplication::sendEvent(view->plot(), &wheel);
  const QCPRange after = view->visibleRange();
  EXPECT_LT(after.size(), before.size());
  EXPECT_DOUBLE_EQ(after.lower, memoryRange().lower);
  EXPECT_DOUBLE_EQ(after.upper, memoryRange().upper);

  view->fitToView();
  EXPECT_NEAR(view->visibleRange().size(), full.size(), 1e-9);
}

TEST_F(TimelineViewTest, DrawMergesSubPixelOpsAndLabelsWideOnes) {
  auto big = std::make_shared<const Plan>(syntheticPlan(8, 1024));
  view->setPlan(big);
  view->plot()->replot(QCustomPlot::rpImmediateRefresh);
  const TimelineDrawStats full = view->plottable()->lastDrawStats();
  EXPECT_EQ(full.visibleItems, big->ops.size() + big->comms.size());
  // At full view thousands of ops share pixels: one rect per pixel column and lane at most.
  EXPECT_LE(full.rects, static_cast<std::size_t>(view->timeline()->lanes().size()) *
                            static_cast<std::size_t>(view->timelineRect()->width() + 2));
  EXPECT_LT(full.rects, big->ops.size());
  EXPECT_LE(full.drawCalls, 2u + kShadeCount);
  EXPECT_EQ(full.labels, 0u);

  view->setVisibleRange(100.0, 130.0);
  view->plot()->replot(QCustomPlot::rpImmediateRefresh);
  const TimelineDrawStats zoomed = view->plottable()->lastDrawStats();
  EXPECT_LT(zoomed.visibleItems, full.visibleItems / 10);
  EXPECT_GT(zoomed.labels, 0u);
}

TEST_F(TimelineViewTest, RubberBandZoomsToItsTimeWindow) {
  QCPAxis* key = view->timelineRect()->axis(QCPAxis::atBottom);
  const int x0 = static_cast<int>(key->coordToPixel(4.0));
  const int x1 = static_cast<int>(key->coordToPixel(12.0));
  const int y = static_cast<int>(view->timelineRect()->center().y());
  QTest::mousePress(view->plot(), Qt::LeftButton, Qt::ShiftModifier, QPoint(x0, y));
  QTest::mouseMove(view->plot(), QPoint((x0 + x1) / 2, y + 10));
  QMouseEvent move(QEvent::MouseMove, QPointF(x1, y + 20), view->plot()->mapToGlobal(QPointF(x1, y + 20)),
                   Qt::NoButton, Qt::LeftButton, Qt::ShiftModifier);
  QApplication::sendEvent(view->plot(), &move);
  QTest::mouseRelease(view->plot(), Qt::LeftButton, Qt::ShiftModifier, QPoint(x1, y + 20));
  const QCPRange r = view->visibleRange();
  EXPECT_NEAR(r.lower, 4.0, 0.2);
  EXPECT_NEAR(r.upper, 12.0, 0.2);
}

TEST_F(TimelineViewTest, ExportsImages) {
  const QString dir = QStringLiteral(PIPESTUDIO_BINARY_DIR) + QStringLiteral("/test-output");
  QDir().mkpath(dir);
  for (const QString& suffix : {QStringLiteral("png"), QStringLiteral("svg"), QStringLiteral("pdf")}) {
    const QString path = dir + QStringLiteral("/timeline.") + suffix;
    QFile::remove(path);
    ASSERT_TRUE(view->exportImage(path, 800, 500)) << path.toStdString();
    EXPECT_GT(QFileInfo(path).size(), 1000) << path.toStdString();
  }
}

TEST(CompareViewTest, StacksTwoPlansOnOneAxis) {
  pipestudio::testing::qtApp();
  CompareView view;
  view.resize(1000, 800);
  auto a = std::make_shared<const Plan>(syntheticPlan(4, 8));
  auto b = std::make_shared<const Plan>(syntheticPlan(4, 8, true, 0.5));
  view.setPlans(a, b);
  view.plot()->replot(QCustomPlot::rpImmediateRefresh);
  const QCPRange r = view.visibleRange();
  double end = 0;
  for (const Op& op : a->ops) end = std::max(end, op.endMs);
  EXPECT_GE(r.upper, end);  // the longer plan fits
  EXPECT_GT(view.model()->rowCount(), 4 + 3 * 4 - 1);
}

}  // namespace
}  // namespace pipestudio::viz
