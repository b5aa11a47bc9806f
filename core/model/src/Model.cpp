#include "pipestudio/model/Model.hpp"

#include "pipestudio/model/Hosts.hpp"

namespace pipestudio {

int ModelSpec::componentIndex(const std::string& componentName) const {
  for (std::size_t i = 0; i < components.size(); ++i) {
    if (components[i].name == componentName) return static_cast<int>(i);
  }
  return -1;
}

std::vector<int> ModelSpec::trainableComponents() const {
  std::vector<int> out;
  for (std::size_t i = 0; i < components.size(); ++i) {
    if (components[i].trainable) out.push_back(static_cast<int>(i));
  }
  return out;
}

std::vector<int> ModelSpec::frozenComponents() const {
  std::vector<int> out;
  for (std::size_t i = 0; i < components.size(); ++i) {
    if (!components[i].trainable) out.push_back(static_cast<int>(i));
  }
  return out;
}

int HostsSpec::totalGpus() const {
  int total = 0;
  for (const auto& h : hosts) total += h.gpus;
  return total;
}

}  // namespace pipestudio
