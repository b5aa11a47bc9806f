#include <gtest/gtest.h>

#include <QAbstractItemModelTester>
#include <QSignalSpy>
#include <QUndoStack>
#include <cmath>
#include <functional>
#include <memory>

#include "QtTestApp.hpp"
#include "model/CostFixtures.hpp"
#include "pipestudio/common/JsonReader.hpp"
#include "pipestudio/model/Limits.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/viz/MetricsModel.hpp"
#include "pipestudio/viz/SpecModels.hpp"
#include "support/SyntheticPlan.hpp"

using pipestudio::test::shapeOf;

namespace pipestudio::viz {
namespace {

using test::syntheticPlan;
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
    l.transformer = shapeOf(1024, 512, 16);
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

  // A shaped layer's times and sizes are its shape's: a measured value beside them is refused,
  // as the loader refuses it (never half measured, half derived).
  EXPECT_FALSE(layers.setData(fwd, QStringLiteral("2.5")));
  EXPECT_TRUE(layers.data(fwd, Qt::ToolTipRole).toString().contains(QStringLiteral("transformer shape")));
  EXPECT_FALSE(layers.modelSpec().components[1].layers[0].forwardMs.has_value());
  EXPECT_FALSE(layers.setData(layers.index(1, LayerTableModel::ActivationBytes), QStringLiteral("1GiB")));

  // On a measured layer a good value replaces it, clears the mark, and is undoable.
  const QModelIndex measured = layers.index(0, LayerTableModel::ForwardMs);
  EXPECT_FALSE(layers.setData(measured, QStringLiteral("fast")));
  EXPECT_TRUE(layers.setData(measured, QStringLiteral("2.5")));
  EXPECT_FALSE(layers.data(measured, Qt::BackgroundRole).isValid());
  EXPECT_DOUBLE_EQ(*layers.modelSpec().components[0].layers[0].forwardMs, 2.5);
  EXPECT_EQ(edited.count(), 1);
  undo.undo();
  EXPECT_DOUBLE_EQ(*layers.modelSpec().components[0].layers[0].forwardMs, 1.0);
  undo.redo();
  EXPECT_DOUBLE_EQ(*layers.modelSpec().components[0].layers[0].forwardMs, 2.5);

  // Frozen components have no backward.
  const QModelIndex frozenBackward = layers.index(0, LayerTableModel::BackwardInputMs);
  EXPECT_FALSE(layers.setData(frozenBackward, QStringLiteral("1")));
  EXPECT_TRUE(layers.data(frozenBackward, Qt::ToolTipRole).toString().contains(QStringLiteral("frozen")));

  // Sizes accept units and round-trip exactly through undo.
  const QModelIndex act = layers.index(0, LayerTableModel::ActivationBytes);
  EXPECT_TRUE(layers.setData(act, QStringLiteral("1.5GiB")));
  EXPECT_EQ(*layers.modelSpec().components[0].layers[0].activationBytes, 1536LL << 20);
  EXPECT_TRUE(layers.setData(act, QStringLiteral("1000")));
  undo.undo();
  EXPECT_EQ(*layers.modelSpec().components[0].layers[0].activationBytes, 1536LL << 20);
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

// The GUI's cell editors and the file loaders share model/Limits.hpp: at every bound, and one
// step past it, a value the editor accepts loads and a value the loader refuses cannot be typed.
ClusterSpec boundaryCluster() {
  ClusterSpec c;
  c.name = "c";
  c.gpu = {"A100", 312, 80, 0.5};
  c.nodes = {{"node0", 8, std::nullopt, std::nullopt}};
  c.intraNode = {200, 5};
  c.interNode = {25, 10};
  return c;
}

bool loaderAccepts(const Json& doc) {
  auto parsed = parseJson(doc.dump(), "boundary.json");
  if (!parsed) return false;
  JsonReader reader(*parsed);
  const bool read = doc.contains("nodes") ? readCluster(reader, reader.root()).has_value()
                                          : readModel(reader, reader.root()).has_value();
  return read && reader.ok();
}

std::vector<double> aroundBounds(double min, double max) {
  return {std::nextafter(min, -1e300), min, std::nextafter(min, 1e300),
          std::nextafter(max, -1e300), max, std::nextafter(max, 1e300)};
}

TEST(Models, EditorsAndLoaderAgreeAtEveryBound) {
  pipestudio::testing::qtApp();
  struct ClusterField {
    int row;
    ClusterTableModel::Column column;
    limits::NumberRange range;
    std::function<void(Json&, double)> set;
  };
  const std::vector<ClusterField> fields{
      {0, ClusterTableModel::PeakTflops, limits::kPeakTflops, [](Json& j, double v) { j["gpu"]["peak_tflops"] = v; }},
      {0, ClusterTableModel::MemoryGib, limits::kMemoryGib, [](Json& j, double v) { j["gpu"]["memory_gib"] = v; }},
      {0, ClusterTableModel::Efficiency, limits::kEfficiency, [](Json& j, double v) { j["gpu"]["efficiency"] = v; }},
      {1, ClusterTableModel::BandwidthGBps, limits::kLinkBandwidthGBps,
       [](Json& j, double v) { j["links"]["intra_node"]["bandwidth_gbps"] = v; }},
      {2, ClusterTableModel::LatencyUs, limits::kLinkLatencyUs,
       [](Json& j, double v) { j["links"]["inter_node"]["latency_us"] = v; }},
  };
  for (const ClusterField& f : fields) {
    for (double v : aroundBounds(f.range.min, f.range.max)) {
      ClusterTableModel cluster;
      cluster.setClusterSpec(boundaryCluster());
      const bool editor = cluster.setData(cluster.index(f.row, f.column), QString::number(v, 'g', 17));
      Json doc = clusterToJson(boundaryCluster());
      f.set(doc, v);
      EXPECT_EQ(editor, loaderAccepts(doc)) << "column " << f.column << " value " << v;
      EXPECT_EQ(editor, f.range.contains(v)) << "column " << f.column << " value " << v;
    }
  }
  for (std::int64_t gpus : {limits::kGpusPerNode.min - 1, limits::kGpusPerNode.min, limits::kGpusPerNode.max,
                            limits::kGpusPerNode.max + 1}) {
    ClusterTableModel cluster;
    cluster.setClusterSpec(boundaryCluster());
    const bool editor = cluster.setData(cluster.index(0, ClusterTableModel::Gpus), QString::number(gpus));
    Json doc = clusterToJson(boundaryCluster());
    doc["nodes"][0]["gpus"] = gpus;
    EXPECT_EQ(editor, loaderAccepts(doc)) << "gpus " << gpus;
    EXPECT_EQ(editor, limits::kGpusPerNode.contains(gpus)) << "gpus " << gpus;
  }
  // A layer's measured time and its sizes (row 0: the measured layer of the frozen component; a
  // shaped layer takes none, loader and editor alike).
  for (double ms : aroundBounds(limits::kLayerMs.min, limits::kLayerMs.max)) {
    LayerTableModel layers;
    layers.setModelSpec(twoComponentModel());
    const bool editor = layers.setData(layers.index(0, LayerTableModel::ForwardMs), QString::number(ms, 'g', 17));
    Json doc = modelToJson(twoComponentModel());
    doc["components"][0]["layers"][0]["forward_ms"] = ms;
    EXPECT_EQ(editor, loaderAccepts(doc)) << "forward_ms " << ms;
    EXPECT_EQ(editor, limits::kLayerMs.contains(ms)) << "forward_ms " << ms;
  }
  for (std::int64_t bytes :
       {limits::kLayerBytes.min - 1, limits::kLayerBytes.min, limits::kLayerBytes.max, limits::kLayerBytes.max + 1}) {
    LayerTableModel layers;
    layers.setModelSpec(twoComponentModel());
    const bool editor = layers.setData(layers.index(0, LayerTableModel::ActivationBytes),
                                       QString::number(static_cast<qlonglong>(bytes)));
    Json doc = modelToJson(twoComponentModel());
    doc["components"][0]["layers"][0]["activation_bytes"] = bytes;
    EXPECT_EQ(editor, loaderAccepts(doc)) << "activation_bytes " << bytes;
    EXPECT_EQ(editor, limits::kLayerBytes.contains(bytes)) << "activation_bytes " << bytes;
  }
}

}  // namespace
}  // namespace pipestudio::viz
