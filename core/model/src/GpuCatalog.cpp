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
