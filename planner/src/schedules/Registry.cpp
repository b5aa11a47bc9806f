// The schedule registry: an explicit list, in the order `pipestudio-cli schedules` prints.
// To add a schedule, write its generator and add one line here.
#include <algorithm>
#include <array>
#include <cctype>
#include <memory>

#include "autosched/Generators.hpp"
#include "schedules/Generators.hpp"

namespace pipestudio {
namespace {

std::vector<std::unique_ptr<ScheduleGenerator>> buildRegistry() {
  std::vector<std::unique_ptr<ScheduleGenerator>> all;
  all.push_back(schedules::makeGpipe());
  all.push_back(schedules::makeOneFOneB());
  all.push_back(schedules::makeInterleaved());
  all.push_back(schedules::makeZbH1());
  all.push_back(schedules::makeZbH2());
  all.push_back(schedules::makeZbV());
  all.push_back(schedules::makeInterleavedZeroBubble());
  all.push_back(schedules::makeVHalf());
  all.push_back(schedules::makeVMin());
  all.push_back(schedules::makeBitPipe());
  all.push_back(schedules::makeDualPipe());
  all.push_back(schedules::makeDualPipeV());
  all.push_back(schedules::makeBreadthFirst());
  all.push_back(schedules::makeZeroPp());
  all.push_back(schedules::makePipeOffload());
  all.push_back(schedules::makeSeq1F1B());
  all.push_back(schedules::makeVOneFOneB());
  // "auto" helper: zb-auto and custom go here.
  all.push_back(autosched::makeZbAutoGenerator());
  all.push_back(autosched::makeCustomGenerator());
  return all;
}

}  // namespace

const std::vector<const ScheduleGenerator*>& scheduleGenerators() {
  static const auto owned = buildRegistry();
  static const std::vector<const ScheduleGenerator*> view = [] {
    std::vector<const ScheduleGenerator*> v;
    v.reserve(owned.size());
    for (const auto& g : owned) v.push_back(g.get());
    return v;
  }();
  return view;
}

namespace {

// torch.distributed.pipelining's schedule names (get_schedule_class) and ours for the same
// schedule. LoopedBFS is the breadth-first schedule of Lamy-Poirier 2023 on the looped placement.
struct ScheduleAlias {
  std::string_view pytorch;
  std::string_view ours;
};
constexpr std::array<ScheduleAlias, 7> kTorchAliases{{
    {"GPipe", "gpipe"},
    {"1F1B", "1f1b"},
    {"Interleaved1F1B", "interleaved-1f1b"},
    {"LoopedBFS", "breadth-first"},
    {"InterleavedZeroBubble", "interleaved-zb"},
    {"ZBVZeroBubble", "zb-v"},
    {"DualPipeV", "dualpipe-v"},
}};

bool equalsIgnoringCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

std::optional<std::string_view> scheduleForAlias(std::string_view name) {
  for (const ScheduleAlias& a : kTorchAliases) {
    if (equalsIgnoringCase(a.pytorch, name)) return a.ours;
  }
  return std::nullopt;
}

const ScheduleGenerator* findScheduleGenerator(std::string_view name) {
  if (auto ours = scheduleForAlias(name)) name = *ours;
  for (const ScheduleGenerator* g : scheduleGenerators()) {
    if (g->name() == name) return g;
  }
  return nullptr;
}

std::vector<std::string> scheduleNames() {
  std::vector<std::string> names;
  for (const ScheduleGenerator* g : scheduleGenerators()) names.emplace_back(g->name());
  return names;
}

}  // namespace pipestudio
