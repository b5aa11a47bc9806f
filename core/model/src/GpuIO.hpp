#pragma once
// Reading GPU descriptions: a cluster file's `gpu` (a catalogue name, or an object that may
// start from one) and the catalogue's own entries. Private to the model library.

#include <optional>

#include "pipestudio/common/JsonReader.hpp"
#include "pipestudio/model/GpuCatalog.hpp"

namespace pipestudio {

/// A cluster file's GPU: `"H100"` (a catalogue name or alias) or an object of fields, which
/// with `"model": "<catalogue name>"` starts from that entry. `nvlinkDomain` receives the
/// catalogue entry's NVLink domain when the GPU came from the catalogue (else left as is).
std::optional<GpuSpec> readGpu(JsonReader& r, const JsonNode& node, int* nvlinkDomain = nullptr);

/// `node`'s "expert_gemm_curve" (an array of measured points) onto `g`, when present.
void readExpertGemmCurve(JsonReader& r, const JsonNode& node, GpuSpec& g);

/// One entry of resources/gpus/catalog.json.
std::optional<CatalogGpu> readCatalogGpu(JsonReader& r, const JsonNode& node);

}  // namespace pipestudio
