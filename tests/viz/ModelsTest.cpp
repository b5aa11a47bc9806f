#include <gtest/gtest.h>

#include <memory>

#include <QAbstractItemModelTester>
#include <QSignalSpy>
#include <QUndoStack>

#include "QtTestApp.hpp"
#include "SyntheticPlan.hpp"
#include "pipestudio/viz/MetricsModel.hpp"
#include "pipestudio/viz/SpecModels.hpp"

namespace pipestudio::viz {
namespace {

using testing::syntheticPlan;
using Tester = QAbstractItemModelTester;

ModelSpec twoComponentModel() {
  ModelSpec m;
  m.name = "m";
  Component text{"text", false, {"unet"}, {}};
  Layer t;
  t.name = "t0";
  t.forwardMs = 1.0;
  text.layers.push_back(t);
  Component unet{"unet", true, {}, {}};
  for (int i = 0; i < 3; ++i) {
    Layer l;
    l.name = "u" + std::to_string(i);
    l.kind = "transformer";
    l.transformer = TransformerShape{1024, 512, 16, 0, std::nullopt};
    unet.layers.push_back(l);
  }
  m.components = {text, unet};
  return m;
}

TEST(Models, MetricsAndCompareModelsPassTheTester) {
  pipestudio::testing::qtApp();
  auto a = std::make_shared<const Plan>(syntheticPlan(4, 8));
  auto b = std::make_shared<const Plan>(syntheticPlan(4, 8, true, 0.5));
  MetricsModel metrics;
  Tester t1(&metrics, Tester::FailureReportingMode::Fatal);
  metrics.setPlan(a);
  EXPECT_EQ(metrics.rowCount(), 4);
  EXPECT_GT(metrics.data(metrics.index(0, MetricsModel::BusyMs), Qt::UserRole).toDouble(), 0.0);
  metrics.setPlan(nullptr);
  EXPECT_EQ(metrics.rowCount(), 0);

  CompareModel compare;
  Tester t2(&compare, Tester::FailureReportingMode::Fatal);
  compare.setPlans(a, b);
  ASSERT_EQ(compare.rows().front().name, QStringLiteral("Makespan"));
  EXPECT_NEAR(compare.rows().front().current, compare.rows().front().baseline * 0.5, 1e-9);
  EXPECT_LT(compare.data(compare.index(0, CompareModel::Delta), Qt::UserRole).toDouble(), 0.0);
  compare.setPlans(nullptr, b);
  EXPECT_EQ(compare.data(compare.index(0, CompareModel::Delta)).toString(), QStringLiteral("—"));
}

TEST(Models, LayerEditsValidateInPlaceAndUndo) {
  pipestudio::testing::qtApp();
  LayerTableModel layers;
  Tester tester(&layers, Tester::FailureReportingMode::Fatal);
  QUndoStack undo;
  layers.setUndoStack(&undo);
  layers.setModelSpec(twoComponentModel());
  ASSERT_EQ(layers.rowCount(), 4);
  QSignalSpy edited(&layers, &SpecTableModel::specEdited);

  // Shape-derived cost shows as "auto".
  const QModelIndex fwd = layers.index(1, LayerTableModel::ForwardMs);
  EXPECT_EQ(layers.data(fwd).toString(), QStringLiteral("auto"));

  // A bad value stays in the cell, marked, with the reason; the spec is unchanged.
  EXPECT_FALSE(layers.setData(fwd, QStringLiteral("fast")));
  EXPECT_EQ(layers.data(fwd).toString(), QStringLiteral("fast"));
  EXPECT_TRUE(layers.data(fwd, Qt::BackgroundRole).isValid());
  EXPECT_TRUE(layers.data(fwd, Qt::ToolTipRole).toString().contains(QStringLiteral("not a number")));
  EXPECT_FALSE(layers.modelSpec().components[1].layers[0].forwardMs.has_value());
  EXPECT_EQ(edited.count(), 0);
  EXPECT_FALSE(layers.setData(fwd, QStringLiteral("-1")));

  // A good value replaces it, clears the mark, and is undoable.
  EXPECT_TRUE(layers.setData(fwd, QStringLiteral("2.5")));
  EXPECT_FALSE(layers.data(fwd, Qt::BackgroundRole).isValid());
  EXPECT_DOUBLE_EQ(*layers.modelSpec().components[1].layers[0].forwardMs, 2.5);
  EXPECT_EQ(edited.count(), 1);
  undo.undo();
  EXPECT_FALSE(layers.modelSpec().components[1].layers[0].forwardMs.has_value());
  undo.redo();
  EXPECT_DOUBLE_EQ(*layers.modelSpec().components[1].layers[0].forwardMs, 2.5);

  // Frozen components have no backward.
  const QModelIndex frozenBackward = layers.index(0, LayerTableModel::BackwardInputMs);
  EXPECT_FALSE(layers.setData(frozenBackward, QStringLiteral("1")));
  EXPECT_TRUE(layers.data(frozenBackward, Qt::ToolTipRole).toString().contains(QStringLiteral("frozen")));

  // Sizes accept units and round-trip exactly through undo.
  const QModelIndex act = layers.index(2, LayerTableModel::ActivationBytes);
  EXPECT_TRUE(layers.setData(act, QStringLiteral("1.5GiB")));
  EXPECT_EQ(*layers.modelSpec().components[1].layers[1].activationBytes, 1536LL << 20);
  EXPECT_TRUE(layers.setData(act, QStringLiteral("1000")));
  undo.undo();
  EXPECT_EQ(*layers.modelSpec().components[1].layers[1].activationBytes, 1536LL << 20);
  EXPECT_FALSE(layers.setData(act, QStringLiteral("12 parsecs")));

  // Duplicate layer names within a component are refused.
  EXPECT_FALSE(layers.setData(layers.index(1, LayerTableModel::Name), QStringLiteral("u1")));
  EXPECT_FALSE(layers.flags(layers.index(0, LayerTableModel::Component)).testFlag(Qt::ItemIsEditable));
}

TEST(Models, ComponentFeedsMustNameComponents) {
  pipestudio::testing::qtApp();
  ModelSpec spec = twoComponentModel();
  spec.components[0].feeds = {"unet", "nowhere"};  // loaded with a broken reference
  ComponentTableModel components;
  Tester tester(&components, Tester::FailureReportingMode::Fatal);
  QUndoStack undo;
  components.setUndoStack(&undo);
  components.setModelSpec(spec);
  const QModelIndex feeds = components.index(0, ComponentTableModel::Feeds);
  EXPECT_TRUE(components.data(feeds, Qt::BackgroundRole).isValid());
  EXPECT_TRUE(components.data(feeds, Qt::ToolTipRole).toString().contains(QStringLiteral("nowhere")));
  EXPECT_FALSE(components.setData(feeds, QStringLiteral("unet, ghost")));
  EXPECT_FALSE(components.setData(feeds, QStringLiteral("text")));  // feeding itself
  EXPECT_TRUE(components.setData(feeds, QStringLiteral("unet")));
  EXPECT_FALSE(components.hasErrors());
  // Renaming a component keeps the feeds that point at it.
  EXPECT_TRUE(components.setData(components.index(1, ComponentTableModel::Name), QStringLiteral("backbone")));
  EXPECT_EQ(components.modelSpec().components[0].feeds.front(), "backbone");
  // Trainable is a check box.
  const QModelIndex trainable = components.index(0, ComponentTableModel::Trainable);
  EXPECT_TRUE(components.flags(trainable).testFlag(Qt::ItemIsUserCheckable));
  EXPECT_TRUE(components.setData(trainable, Qt::Checked, Qt::CheckStateRole));
  EXPECT_TRUE(components.modelSpec().components[0].trainable);
  undo.undo();
  EXPECT_FALSE(components.modelSpec().components[0].trainable);
}

TEST(Models, ClusterCellsValidate) {
  pipestudio::testing::qtApp();
  ClusterSpec c;
  c.name = "c";
  c.gpu = {"A100", 312, 80, 0.5};
  c.nodes = {{"node0", 8, std::nullopt, std::nullopt}, {"node1", 8, std::nullopt, std::nullopt}};
  c.intraNode = {200, 5};
  c.interNode = {25, 10};
  ClusterTableModel cluster;
  Tester tester(&cluster, Tester::FailureReportingMode::Fatal);
  cluster.setClusterSpec(c);
  ASSERT_EQ(cluster.rowCount(), 4);
  EXPECT_FALSE(cluster.setData(cluster.index(0, ClusterTableModel::Gpus), QStringLiteral("2.5")));
  EXPECT_FALSE(cluster.setData(cluster.index(0, ClusterTableModel::Efficiency), QStringLiteral("1.5")));
  EXPECT_FALSE(cluster.setData(cluster.index(0, ClusterTableModel::Efficiency), QStringLiteral("0")));
  EXPECT_TRUE(cluster.setData(cluster.index(0, ClusterTableModel::MemoryGib), QStringLiteral("40")));
  EXPECT_DOUBLE_EQ(cluster.clusterSpec().gpu.memoryGib, 40.0);
  EXPECT_FALSE(cluster.setData(cluster.index(2, ClusterTableModel::BandwidthGBps), QStringLiteral("0")));
  EXPECT_TRUE(cluster.setData(cluster.index(3, ClusterTableModel::BandwidthGBps), QStringLiteral("50")));
  EXPECT_DOUBLE_EQ(cluster.clusterSpec().interNode.bandwidthGBps, 50.0);
  EXPECT_FALSE(cluster.flags(cluster.index(2, ClusterTableModel::Host)).testFlag(Qt::ItemIsEditable));
}

}  // namespace
}  // namespace pipestudio::viz
