// Data-flow neighbours of virtual stages (plan/Dependencies.hpp), the one definition the
// simulator and the executor share.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipestudio/plan/Dependencies.hpp"

namespace pipestudio {
namespace {

Component component(const std::string& name, bool trainable, int layers, std::vector<std::string> feeds = {}) {
  Component c{name, trainable, std::move(feeds), {}};
  for (int i = 0; i < layers; ++i) {
    Layer l;
    l.name = name + std::to_string(i);
    l.forwardMs = 1;
    c.layers.push_back(l);
  }
  return c;
}

VirtualStage stage(int id, int device, int comp, int first, int last, int pipeline = 0) {
  VirtualStage vs;
  vs.id = id;
  vs.device = device;
  vs.component = comp;
  vs.firstLayer = first;
  vs.lastLayer = last;
  vs.pipeline = pipeline;
  return vs;
}

TEST(StageNeighbours, ABackboneThatFeedsTheNextContinuesIntoIt) {
  // ControlNet feeds the UNet: one chain down the V and back up.
  Plan p;
  p.model.components = {component("controlnet", true, 4, {"unet"}), component("unet", true, 4)};
  p.virtualStages = {stage(0, 0, 0, 0, 1), stage(1, 1, 0, 2, 3), stage(2, 1, 1, 0, 1), stage(3, 0, 1, 2, 3)};
  const StageNeighbours n = stageNeighbours(p);
  EXPECT_EQ(n.previous, (std::vector<int>{-1, 0, 1, 2}));
  EXPECT_EQ(n.next, (std::vector<int>{1, 2, 3, -1}));
}

TEST(StageNeighbours, IndependentBackbonesFormTheirOwnChains) {
  // Cascaded models trained together: nothing feeds the second, so its first stage waits on
  // nothing even though it follows the first backbone in id order.
  Plan p;
  p.model.components = {component("base", true, 4), component("super_resolution", true, 4)};
  p.virtualStages = {stage(0, 0, 0, 0, 1), stage(1, 1, 0, 2, 3), stage(2, 1, 1, 0, 1), stage(3, 0, 1, 2, 3)};
  const StageNeighbours n = stageNeighbours(p);
  EXPECT_EQ(n.previous, (std::vector<int>{-1, 0, -1, 2}));
  EXPECT_EQ(n.next, (std::vector<int>{1, -1, 3, -1}));
}

TEST(StageNeighbours, PipelinesAreSeparateChains) {
  Plan p;
  p.model.components = {component("backbone", true, 4)};
  p.virtualStages = {stage(0, 0, 0, 0, 1, 0), stage(1, 1, 0, 2, 3, 0), stage(2, 1, 0, 0, 1, 1),
                     stage(3, 0, 0, 2, 3, 1)};
  const StageNeighbours n = stageNeighbours(p);
  EXPECT_EQ(n.previous, (std::vector<int>{-1, 0, -1, 2}));
}

TEST(StageNeighbours, FrozenReplicasChainByLayerOnTheirOwnDevice) {
  // A frozen encoder placed once per device (bubble filling): each replica is its own chain,
  // and the trainable backbone after it is not linked to it.
  Plan p;
  p.model.components = {component("vae", false, 6, {"unet"}), component("unet", true, 2)};
  p.virtualStages = {stage(0, 0, 0, 0, 2), stage(1, 0, 0, 3, 5), stage(2, 1, 0, 0, 2),
                     stage(3, 1, 0, 3, 5), stage(4, 0, 1, 0, 0), stage(5, 1, 1, 1, 1)};
  const StageNeighbours n = stageNeighbours(p);
  EXPECT_EQ(n.previous, (std::vector<int>{-1, 0, -1, 2, -1, 4}));
  EXPECT_EQ(n.next, (std::vector<int>{1, -1, 3, -1, 5, -1}));
}

}  // namespace
}  // namespace pipestudio
