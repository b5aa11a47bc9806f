#pragma once
/// \file The GPU catalogue (resources/gpus/catalog.json, compiled in): GPUs as bought today with
/// their datasheet figures and sources, and the calibrated efficiency per precision. Cluster
/// files name a GPU from it (`"gpu": "H100"`) or start from one (`"gpu": {"model": "B200", …}`).

#include <string>
#include <string_view>
#include <vector>

#include "pipestudio/model/Cluster.hpp"

namespace pipestudio {

struct CatalogGpu {
  GpuSpec gpu;
  std::vector<std::string> aliases;
  int nvlinkDomain = 0;   ///< GPUs one NVLink fabric joins (8 on HGX boards, 72 in an NVL72 rack)
  double nvlinkGBps = 0;  ///< NVLink bandwidth per GPU and direction
  /// The entry whose calibrated values (efficiency per precision, attention efficiency, GEMM
  /// fill, EP overlap efficiency) this GPU takes because it is the same silicon at the same
  /// clocks and no published run of its own calibrates it (H200: H100's GH100); "" when the
  /// entry states its own. Resolved when the catalogue is parsed.
  std::string calibrationFrom;
  std::string source;
};

/// Every catalogue entry, in file order (parsed once).
const std::vector<CatalogGpu>& gpuCatalog();
/// The entry named `name` or one of its aliases (case-insensitive), or nullptr.
const CatalogGpu* findCatalogGpu(std::string_view name);
/// "A100-SXM4-80GB, H100-SXM5-80GB, …": the names, for messages.
std::string catalogGpuNames();

}  // namespace pipestudio
