// libFuzzer entry point: every loader path a user-supplied file can reach. Run with
//   build/asan/tests/fuzz/fuzz_loaders -max_total_time=180 tests/fuzz/corpus
// Any crash, sanitizer report, hang or unbounded allocation is a bug in core/.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/JsonReader.hpp"
#include "pipestudio/model/CostModel.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/PlanIO.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipestudio;
  auto doc = parseJson(std::string(reinterpret_cast<const char*>(data), size), "<fuzz>");
  if (!doc) return 0;
  // Every reader on every document: readers must cope with any other kind's shape too.
  {
    JsonReader r(*doc);
    if (auto model = readModel(r, r.root())) {
      const GpuSpec gpu{"fuzz", 312, 80, 0.5};
      for (const Component& c : model->components) {
        for (const Layer& l : c.layers) (void)layerCosts(l, gpu, model->samplesPerMicrobatch, c.trainable);
      }
    }
  }
  {
    JsonReader r(*doc);
    (void)readCluster(r, r.root());
  }
  {
    JsonReader r(*doc);
    (void)readHosts(r, r.root());
  }
  {
    JsonReader r(*doc);
    if (auto plan = readPlan(r, r.root())) {
      // The shared validator (validate, simulate, run, pipestudio-exec) on whatever parsed.
      if (validatePlanStructure(*plan)) (void)memoryTimeline(*plan);
      (void)planToJson(*plan).dump();
      std::ostringstream streamed;
      (void)writePlanJson(streamed, *plan);
    }
  }
  (void)documentKind(*doc);
  // Locating arbitrary pointers must stay in bounds whatever the text looks like.
  (void)doc->where("/components/0/layers/3/forward_ms");
  (void)doc->where("/a~1b/~0/9999999999999999999999");
  return 0;
}
