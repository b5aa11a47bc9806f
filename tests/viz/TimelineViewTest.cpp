#include <gtest/gtest.h>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QLineEdit>
#include <QScrollBar>
#include <QSignalSpy>
#include <QTest>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>
#include <memory>

#include "QtTestApp.hpp"
#include "pipestudio/viz/CompareView.hpp"
#include "pipestudio/viz/MemoryBreakdownView.hpp"
#include "pipestudio/viz/MetricsModel.hpp"
#include "pipestudio/viz/SelectionPanel.hpp"
#include "pipestudio/viz/TimelinePlottable.hpp"
#include "pipestudio/viz/TimelineView.hpp"
#include "support/SyntheticPlan.hpp"

namespace pipestudio::viz {
namespace {

using test::syntheticPlan;

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
    const Op& o = plan->op(op);
    QCPAxis* key = view->timelineRect()->axis(QCPAxis::atBottom);
    QCPAxis* value = view->timelineRect()->axis(QCPAxis::atLeft);
    const Lane& lane = view->timeline()->lane(view->timeline()->laneOf({ItemRef::Kind::Op, op}));
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
  QWheelEvent wheel(at, view->plot()->mapToGlobal(at.toPoint()), QPoint(), QPoint(0, 120), Qt::NoButton, Qt::NoModifier,
                    Qt::NoScrollPhase, false);
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
  QMouseEvent move(QEvent::MouseMove, QPointF(x1, y + 20), view->plot()->mapToGlobal(QPointF(x1, y + 20)), Qt::NoButton,
                   Qt::LeftButton, Qt::ShiftModifier);
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

TEST_F(TimelineViewTest, LegendNamesWhatIsDrawnAndGoesIntoExports) {
  const QStringList names = view->legend()->entryNames();
  for (const char* expected : {"F forward", "B input gradient", "W weight gradient", "activation transfer",
                               "gradient transfer", "bubble (idle)", "critical path", "selected microbatch"}) {
    EXPECT_TRUE(names.contains(QString::fromLatin1(expected)))
        << expected << ": " << names.join(QStringLiteral(", ")).toStdString();
  }
  EXPECT_FALSE(names.contains(QStringLiteral("BW backward")));  // only kinds the plan holds
  EXPECT_GT(view->legend()->outerRect().height(), 8);
  // The title line names schedule, makespan and bubble; exports carry legend and title.
  EXPECT_TRUE(view->titleText().contains(QStringLiteral("synthetic-1f1b")));
  EXPECT_TRUE(view->titleText().contains(QStringLiteral("makespan")));
  EXPECT_TRUE(view->titleText().contains(QStringLiteral("bubble")));
  const QString dir = QStringLiteral(PIPESTUDIO_BINARY_DIR) + QStringLiteral("/test-output");
  QDir().mkpath(dir);
  const QString path = dir + QStringLiteral("/timeline-legend.png");
  ASSERT_TRUE(view->exportImage(path, 1000, 600, true));
  QImage image(path);
  ASSERT_FALSE(image.isNull());
  // The F swatch (and the title's text) sit above the lanes: look for F's colour in the top band.
  const QRgb f = view->plottable()->timelinePalette().colour(ColourSlot::F, 0).rgb();
  const double lanesTop = 0.12 * image.height();
  bool swatch = false;
  for (int y = 0; y < static_cast<int>(lanesTop) && !swatch; ++y) {
    for (int x = 0; x < image.width() && !swatch; ++x) swatch = image.pixel(x, y) == f;
  }
  EXPECT_TRUE(swatch) << "no F swatch in the top band of the export";
  EXPECT_FALSE(view->titleVisible());  // the export's title does not stay on screen
}

TEST_F(TimelineViewTest, TimeAxisLabelsSwitchUnits) {
  auto labels = [&]() {
    view->plot()->replot(QCustomPlot::rpImmediateRefresh);
    return view->timelineRect()->axis(QCPAxis::atBottom)->tickVectorLabels().join(QLatin1Char(' '));
  };
  view->setVisibleRange(1.0, 1.5);
  EXPECT_TRUE(labels().contains(QStringLiteral("µs"))) << labels().toStdString();
  view->setVisibleRange(0.0, 40.0);
  EXPECT_TRUE(labels().contains(QStringLiteral(" ms"))) << labels().toStdString();
  auto slow = std::make_shared<const Plan>(syntheticPlan(4, 16, true, 2000.0));  // ops of seconds
  view->setPlan(slow);
  EXPECT_TRUE(labels().contains(QStringLiteral(" s"))) << labels().toStdString();
  EXPECT_FALSE(labels().contains(QStringLiteral("ms"))) << labels().toStdString();
  EXPECT_TRUE(view->memoryRect()->axis(QCPAxis::atBottom)->label().contains(QStringLiteral("(s)")));
  view->setVisibleRange(0.0, 11000.0);  // an 11 s window: "10 s", never "10000 ms"
  EXPECT_TRUE(labels().contains(QStringLiteral(" s"))) << labels().toStdString();
  EXPECT_FALSE(labels().contains(QStringLiteral("ms"))) << labels().toStdString();
  // Every label reads back as its tick's time (a 2.5 s step is not rounded to "3 s").
  QCPAxis* axis = view->timelineRect()->axis(QCPAxis::atBottom);
  ASSERT_EQ(axis->tickVector().size(), axis->tickVectorLabels().size());
  ASSERT_GE(axis->tickVector().size(), 3);
  for (int i = 0; i < axis->tickVector().size(); ++i) {
    const QString label = axis->tickVectorLabels().at(i);
    bool ok = false;
    const double seconds = QLocale().toDouble(label.section(QLatin1Char(' '), 0, 0), &ok);
    ASSERT_TRUE(ok) << label.toStdString();
    EXPECT_NEAR(seconds * 1000.0, axis->tickVector().at(i), 1e-6) << label.toStdString();
  }
  view->setVisibleRange(0.0, 4000.0);
  EXPECT_TRUE(labels().contains(QStringLiteral(" ms"))) << labels().toStdString();
}

TEST_F(TimelineViewTest, AReSolveRefitsUnlessTheUserZoomed) {
  auto longer = std::make_shared<const Plan>(syntheticPlan(4, 20));
  view->setPlan(longer, true);
  EXPECT_FALSE(view->userZoomed());
  EXPECT_GE(view->visibleRange().upper, view->timeline()->endMs());  // refitted to the new plan
  view->setVisibleRange(2.0, 6.0);
  EXPECT_TRUE(view->userZoomed());
  view->setPlan(std::make_shared<const Plan>(syntheticPlan(4, 21)), true);
  EXPECT_NEAR(view->visibleRange().lower, 2.0, 1e-9);  // kept: the user chose it
  EXPECT_NEAR(view->visibleRange().upper, 6.0, 1e-9);
  view->fitToView();
  EXPECT_FALSE(view->userZoomed());
  // A drag pans: also the user's choice.
  const QPoint at = view->timelineRect()->center();
  QTest::mousePress(view->plot(), Qt::LeftButton, Qt::NoModifier, at);
  QMouseEvent move(QEvent::MouseMove, QPointF(at.x() + 60, at.y()),
                   view->plot()->mapToGlobal(QPointF(at.x() + 60, at.y())), Qt::NoButton, Qt::LeftButton,
                   Qt::NoModifier);
  QApplication::sendEvent(view->plot(), &move);
  QTest::mouseRelease(view->plot(), Qt::LeftButton, Qt::NoModifier, QPoint(at.x() + 60, at.y()));
  EXPECT_TRUE(view->userZoomed());
}

TEST_F(TimelineViewTest, FastWheelEventsZoomByTheirWholeDelta) {
  const QPointF at(view->timelineRect()->center());
  auto wheel = [&](int delta) {
    QWheelEvent event(at, view->plot()->mapToGlobal(at.toPoint()), QPoint(), QPoint(0, delta), Qt::NoButton,
                      Qt::NoModifier, Qt::NoScrollPhase, false);
    QApplication::sendEvent(view->plot(), &event);
  };
  view->fitToView();
  const double full = view->visibleRange().size();
  wheel(360);  // one fast event of three notches
  const double oneEvent = view->visibleRange().size();
  EXPECT_NEAR(oneEvent, full * std::pow(0.85, 3), 1e-6 * full);
  view->fitToView();
  for (int i = 0; i < 3; ++i) wheel(120);
  EXPECT_NEAR(view->visibleRange().size(), oneEvent, 1e-6 * full);
  view->fitToView();
  wheel(40);  // a third of a notch (high-resolution wheels) zooms a third as much
  EXPECT_NEAR(view->visibleRange().size(), full * std::pow(0.85, 1.0 / 3.0), 1e-6 * full);
}

TEST_F(TimelineViewTest, CriticalPathStaysThinAtFullView) {
  auto big = std::make_shared<const Plan>(syntheticPlan(8, 512));
  view->setPlan(big);
  view->plot()->replot(QCustomPlot::rpImmediateRefresh);
  EXPECT_FALSE(view->overlay()->criticalPath().empty());
  EXPECT_DOUBLE_EQ(view->overlay()->lastCriticalPenWidth(), 1.0);
  view->setVisibleRange(100.0, 110.0);
  view->plot()->replot(QCustomPlot::rpImmediateRefresh);
  EXPECT_DOUBLE_EQ(view->overlay()->lastCriticalPenWidth(), 1.5);
}

TEST_F(TimelineViewTest, SearchFadesTheRestAndWalksTheMatches) {
  EXPECT_FALSE(view->setSearch(QStringLiteral("W mb 3")).has_value());
  ASSERT_EQ(view->searchMatches().size(), 4u);
  const auto& mask = view->plottable()->opMask();
  ASSERT_EQ(mask.values().size(), plan->ops.size());
  for (int i = 0; i < mask.size(); ++i) {
    const bool match = plan->op(i).kind == OpKind::W && plan->op(i).microbatch == 3;
    EXPECT_EQ(mask[i] != 0, match) << i;
  }
  view->plot()->replot(QCustomPlot::rpImmediateRefresh);
  EXPECT_GT(view->plottable()->lastDrawStats().drawCalls, 2u);
  ASSERT_TRUE(view->nextMatch());
  const int first = view->selectedOp();
  EXPECT_EQ(plan->op(first).kind, OpKind::W);
  ASSERT_TRUE(view->nextMatch());
  EXPECT_NE(view->selectedOp(), first);
  const auto bad = view->setSearch(QStringLiteral("mb seven"));
  ASSERT_TRUE(bad.has_value());
  EXPECT_TRUE(bad->contains(QStringLiteral("expected")));
  EXPECT_TRUE(view->plottable()->opMask().empty());  // a bad query filters nothing
  // Ctrl+F opens the search field.
  view->setFocus();
  QTest::keyClick(view.get(), Qt::Key_F, Qt::ControlModifier);
  EXPECT_TRUE(view->searchField()->isVisible());
  QTest::keyClicks(view->searchField(), QStringLiteral("F gpu 1"));
  EXPECT_EQ(view->searchMatches().size(), 16u);
  view->setSearch(QString());
  EXPECT_TRUE(view->searchMatches().empty());
}

TEST_F(TimelineViewTest, CtrlDragMeasuresARange) {
  QSignalSpy measured(view.get(), &TimelineView::rangeMeasured);
  QCPAxis* key = view->timelineRect()->axis(QCPAxis::atBottom);
  const int y = view->timelineRect()->center().y();
  const QPoint from(static_cast<int>(key->coordToPixel(4.0)), y);
  const QPoint to(static_cast<int>(key->coordToPixel(20.0)), y);
  const QCPRange before = view->visibleRange();
  QTest::mousePress(view->plot(), Qt::LeftButton, Qt::ControlModifier, from);
  QMouseEvent move(QEvent::MouseMove, QPointF(to), view->plot()->mapToGlobal(QPointF(to)), Qt::NoButton, Qt::LeftButton,
                   Qt::ControlModifier);
  QApplication::sendEvent(view->plot(), &move);
  QTest::mouseRelease(view->plot(), Qt::LeftButton, Qt::ControlModifier, to);
  ASSERT_TRUE(view->measurement().has_value());
  EXPECT_GE(measured.count(), 1);
  const RangeMeasurement& m = *view->measurement();
  EXPECT_NEAR(m.fromMs, key->pixelToCoord(from.x()), 1e-9);
  EXPECT_NEAR(m.toMs, key->pixelToCoord(to.x()), 1e-9);
  const RangeMeasurement expected = view->timeline()->measure(m.fromMs, m.toMs);
  ASSERT_EQ(m.devices.size(), 4u);
  for (std::size_t d = 0; d < 4; ++d) {
    EXPECT_DOUBLE_EQ(m.devices[d].idleMs, expected.devices[d].idleMs);
    EXPECT_NEAR(m.devices[d].busyMs + m.devices[d].idleMs, m.durationMs(), 1e-9);
  }
  EXPECT_DOUBLE_EQ(view->visibleRange().lower, before.lower);  // measuring does not pan
  view->setFocus();
  QTest::keyClick(view.get(), Qt::Key_Escape);
  EXPECT_FALSE(view->measurement().has_value());
}

TEST_F(TimelineViewTest, SelectionDrawsArrowsToItsNeighboursAndThePanelLinksThem) {
  SelectionPanel panel(view.get());
  int op = -1;
  for (std::size_t i = 0; i < plan->ops.size(); ++i) {
    if (plan->ops[i].kind == OpKind::B && plan->ops[i].device == 1 && plan->ops[i].microbatch == 5)
      op = static_cast<int>(i);
  }
  ASSERT_GE(op, 0);
  view->selectOp(op);
  EXPECT_EQ(view->overlay()->arrowSources(), view->timeline()->dataPredecessors(op));
  EXPECT_EQ(view->overlay()->arrowTargets(), view->timeline()->dataSuccessors(op));
  EXPECT_FALSE(view->overlay()->arrowSources().empty());
  const QString text = panel.plainText();
  EXPECT_TRUE(text.contains(QStringLiteral("B · microbatch 5"))) << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("Predecessors")));
  EXPECT_TRUE(text.contains(QStringLiteral("Successors")));
  EXPECT_TRUE(text.contains(QStringLiteral("Slack")));
  for (int pred : view->timeline()->dataPredecessors(op)) {
    EXPECT_NE(std::find(panel.linkedOps().begin(), panel.linkedOps().end(), pred), panel.linkedOps().end());
  }
  // Following a link selects that op (and brings it on screen).
  const int next = view->timeline()->dataSuccessors(op).front();
  view->setVisibleRange(0.0, 1.0);
  panel.activateLink(QStringLiteral("op:%1").arg(next));
  EXPECT_EQ(view->selectedOp(), next);
  const Op& o = plan->op(next);
  EXPECT_LE(view->visibleRange().lower, o.startMs);
  EXPECT_GE(view->visibleRange().upper, o.endMs);
  // An op on the critical path says so.
  view->selectOp(view->overlay()->criticalPath().back());
  EXPECT_TRUE(panel.plainText().contains(QStringLiteral("on the critical path")));
}

TEST_F(TimelineViewTest, ManyLanesStayLegibleWithLaneZoomAndScrolling) {
  auto wide = std::make_shared<const Plan>(syntheticPlan(64, 128, false));
  view->resize(1024, 600);
  QApplication::processEvents();
  view->setPlan(wide);
  view->plot()->replot(QCustomPlot::rpImmediateRefresh);
  view->plot()->replot(QCustomPlot::rpImmediateRefresh);
  const QCPRange lanes = view->visibleLanes();
  EXPECT_LT(lanes.size(), 64.0);  // not 64 lanes of 5 px
  EXPECT_GE(view->timelineRect()->height() / lanes.size(), 15.0);
  EXPECT_TRUE(view->laneScrollBar()->isVisible());
  EXPECT_TRUE(view->laneLabels().contains(QStringLiteral("GPU 1")));  // every visible lane named
  // Shift+wheel scrolls, Ctrl+wheel zooms the lanes.
  const QPointF at(view->timelineRect()->center());
  QWheelEvent scroll(at, view->plot()->mapToGlobal(at.toPoint()), QPoint(), QPoint(0, -120), Qt::NoButton,
                     Qt::ShiftModifier, Qt::NoScrollPhase, false);
  QApplication::sendEvent(view->plot(), &scroll);
  EXPECT_GT(view->visibleLanes().lower, lanes.lower);
  QWheelEvent zoomOut(at, view->plot()->mapToGlobal(at.toPoint()), QPoint(), QPoint(0, -2400), Qt::NoButton,
                      Qt::ControlModifier, Qt::NoScrollPhase, false);
  QApplication::sendEvent(view->plot(), &zoomOut);
  EXPECT_DOUBLE_EQ(view->visibleLanes().size(), 64.0);  // all lanes, as the user asked
  view->plot()->replot(QCustomPlot::rpImmediateRefresh);
  view->plot()->replot(QCustomPlot::rpImmediateRefresh);
  EXPECT_FALSE(view->laneLabels().contains(QStringLiteral("GPU 1")));  // labels thin out instead of overlapping
  EXPECT_TRUE(view->laneLabels().contains(QStringLiteral("GPU 0")));
  view->setFocus();
  QTest::keyClick(view.get(), Qt::Key_F);
  EXPECT_LT(view->visibleLanes().size(), 64.0);  // fitting returns to legible lanes
}

TEST_F(TimelineViewTest, MemoryPlotReadsOutHighlightsAndTogglesCurves) {
  view->setMemoryLimit(80LL << 30);  // far above the synthetic peaks: named, off the scale
  view->plot()->replot(QCustomPlot::rpImmediateRefresh);
  ASSERT_EQ(view->memoryGraphs().size(), 4u);
  const MemoryTimeline memory = memoryTimeline(*plan);
  QCPAxis* key = view->memoryRect()->axis(QCPAxis::atBottom);
  QCPAxis* value = view->memoryRect()->axis(QCPAxis::atLeft);
  // At 5 ms, point at GPU 2's value.
  const double t = 5.0;
  std::int64_t bytes = 0;
  for (const MemoryPoint& p : memory.devices[2]) {
    if (p.timeMs <= t) bytes = p.bytes;
  }
  const double gib = static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
  const QString text = view->memoryReadout(QPointF(key->coordToPixel(t), value->coordToPixel(gib)));
  EXPECT_TRUE(text.startsWith(QStringLiteral("GPU 2: %1 GiB at").arg(gib, 0, 'f', 2))) << text.toStdString();
  EXPECT_EQ(view->highlightedMemoryCurve(), 2);
  EXPECT_GT(view->memoryGraphs()[2]->pen().widthF(), view->memoryGraphs()[0]->pen().widthF());
  // Hovering a lane of the timeline highlights that device's curve.
  QTest::mouseMove(view->plot(), centreOf(0).toPoint());
  EXPECT_EQ(view->highlightedMemoryCurve(), plan->ops[0].device);
  // The legend hides a curve; hidden curves are not read out.
  view->setMemoryCurveVisible(2, false);
  EXPECT_FALSE(view->memoryGraphs()[2]->visible());
  EXPECT_FALSE(
      view->memoryReadout(QPointF(key->coordToPixel(t), value->coordToPixel(gib))).startsWith(QStringLiteral("GPU 2")));
  // A limit far above the curves does not flatten them: the scale fits the curves and the
  // limit is named above it. Near the peak, the limit joins the scale.
  double peakGiB = 0;
  for (const auto& device : memory.devices) {
    for (const MemoryPoint& p : device) peakGiB = std::max(peakGiB, static_cast<double>(p.bytes) / (1 << 30));
  }
  EXPECT_LT(value->range().upper, 2 * peakGiB);
  EXPECT_TRUE(view->memoryLimitLabel().contains(QStringLiteral("above the scale")))
      << view->memoryLimitLabel().toStdString();
  view->setMemoryLimit(static_cast<std::int64_t>(1.2 * peakGiB * (1 << 30)));
  EXPECT_GE(value->range().upper, 1.2 * peakGiB);
  EXPECT_TRUE(view->memoryLimitLabel().startsWith(QStringLiteral("limit "))) << view->memoryLimitLabel().toStdString();
  EXPECT_FALSE(view->memoryLimitLabel().contains(QStringLiteral("above")));
}

TEST_F(TimelineViewTest, AStalePlanIsDimmedAndLabelled) {
  view->setStale(QStringLiteral("last good plan: synthetic · current settings failed: x"));
  EXPECT_TRUE(view->isStale());
  EXPECT_TRUE(view->plottable()->dimmed());
  view->plot()->replot(QCustomPlot::rpImmediateRefresh);
  view->setStale(QStringLiteral("solving…"), false);
  EXPECT_TRUE(view->isStale());
  EXPECT_FALSE(view->plottable()->dimmed());
  view->setStale(QString());
  EXPECT_FALSE(view->isStale());
}

TEST(MemoryBreakdownViewTest, StacksEveryPartPerDevice) {
  pipestudio::testing::qtApp();
  MemoryBreakdownView breakdown;
  auto plan = std::make_shared<const Plan>(syntheticPlan(4, 8));
  breakdown.setPlan(plan);
  ASSERT_EQ(breakdown.deviceCount(), 4);
  const Metrics m = metricsOf(*plan);
  const auto parts = MemoryBreakdownView::partsOf(m.devices[1]);
  double total = 0;
  for (double p : parts) total += p;
  EXPECT_DOUBLE_EQ(total, static_cast<double>(m.devices[1].peakMemoryBytes + m.devices[1].memory.marginBytes()));
  EXPECT_GT(parts[0], 0.0);  // parameters
  EXPECT_GT(parts[4], 0.0);  // activations
  // The tooltip names every part the device holds.
  const QString text = breakdown.describe(1);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const char* part = MemoryBreakdownView::partNames()[i];
    EXPECT_EQ(text.contains(QString::fromLatin1(part)), parts[i] > 0) << part;
  }
  EXPECT_TRUE(text.contains(QStringLiteral("free")));
  EXPECT_EQ(breakdown.capacityBytes(), plan->cluster.gpu.memoryBytes());
  breakdown.setPlan(nullptr);
  EXPECT_EQ(breakdown.deviceCount(), 0);
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
