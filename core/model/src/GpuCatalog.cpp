#include "pipestudio/model/GpuCatalog.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "GpuIO.hpp"
#include "pipestudio/common/JsonReader.hpp"

namespace pipestudio {

extern const char* const kGpuCatalogJson;  // GpuCatalogData.cpp, generated from resources/gpus/catalog.json

namespace {

bool equalsIgnoringCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// An entry with `calibration_from` takes the calibrated values of the entry it names (one hop:
// that entry must state its own). A name that is not such an entry is a build defect, printed
// like a broken catalogue and caught by the catalogue's test (the entry keeps the defaults).
void resolveCalibrations(std::vector<CatalogGpu>& catalog) {
  for (CatalogGpu& entry : catalog) {
    if (entry.calibrationFrom.empty()) continue;
    const auto source = std::find_if(catalog.begin(), catalog.end(), [&](const CatalogGpu& g) {
      if (equalsIgnoringCase(g.gpu.name, entry.calibrationFrom)) return true;
      return std::any_of(g.aliases.begin(), g.aliases.end(),
                         [&](const std::string& a) { return equalsIgnoringCase(a, entry.calibrationFrom); });
    });
    if (source == catalog.end() || !source->calibrationFrom.empty() || &*source == &entry) {
      std::fprintf(stderr,
                   "pipestudio: resources/gpus/catalog.json: %s: calibration_from '%s' is not a GPU with calibrated "
                   "values of its own\n",
                   entry.gpu.name.c_str(), entry.calibrationFrom.c_str());
      continue;
    }
    entry.gpu.efficiency = source->gpu.efficiency;
    entry.gpu.efficiencyByPrecision = source->gpu.efficiencyByPrecision;
    entry.gpu.attentionEfficiency = source->gpu.attentionEfficiency;
    entry.gpu.gemmFillK = source->gpu.gemmFillK;
    entry.gpu.epOverlapEfficiency = source->gpu.epOverlapEfficiency;
  }
}

std::vector<CatalogGpu> parseCatalog() {
  auto doc = parseJson(kGpuCatalogJson, "resources/gpus/catalog.json");
  std::vector<CatalogGpu> out;
  if (!doc) {
    // The file is part of the build: a broken catalogue is a build defect, caught by its test.
    std::fprintf(stderr, "pipestudio: %s\n", doc.message().c_str());
    return out;
  }
  JsonReader r(*doc);
  if (!r.checkSchema(r.root(), "pipestudio.gpus/1")) return out;
  auto gpus = r.array(r.root(), "gpus", Presence::Required);
  if (!gpus) return out;
  for (std::size_t i = 0; i < gpus->value->size(); ++i) {
    const JsonNode node = gpus->child(i);
    if (auto entry = readCatalogGpu(r, node)) out.push_back(std::move(*entry));
  }
  if (!r.ok()) {
    for (const std::string& e : r.errors()) std::fprintf(stderr, "pipestudio: %s\n", e.c_str());
  }
  resolveCalibrations(out);
  return out;
}

}  // namespace

const std::vector<CatalogGpu>& gpuCatalog() {
  static const std::vector<CatalogGpu> catalog = parseCatalog();
  return catalog;
}

const CatalogGpu* findCatalogGpu(std::string_view name) {
  for (const CatalogGpu& g : gpuCatalog()) {
    if (equalsIgnoringCase(g.gpu.name, name)) return &g;
    for (const std::string& alias : g.aliases) {
      if (equalsIgnoringCase(alias, name)) return &g;
    }
  }
  return nullptr;
}

std::string catalogGpuNames() {
  std::string out;
  for (const CatalogGpu& g : gpuCatalog()) out += (out.empty() ? "" : ", ") + g.gpu.name;
  return out;
}

}  // namespace pipestudio
