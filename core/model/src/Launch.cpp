#include "pipestudio/model/Launch.hpp"

#include "pipestudio/common/Text.hpp"

namespace pipestudio {

namespace {
template <typename Enum, std::size_t N>
std::optional<Enum> parseOne(const std::array<Enum, N>& all, std::string_view text) {
  for (Enum e : all) {
    if (name(e) == text) return e;
  }
  return std::nullopt;
}

template <typename Enum, std::size_t N>
std::vector<std::string> names(const std::array<Enum, N>& all) {
  std::vector<std::string> out;
  for (Enum e : all) out.emplace_back(name(e));
  return out;
}

}  // namespace

std::string_view name(Backend backend) {
  switch (backend) {
    case Backend::Cuda:
      return "cuda";
    case Backend::CudaSingle:
      return "cuda-single";
    case Backend::Cpu:
      return "cpu";
  }
  return "cpu";
}

std::string_view name(Launcher launcher) {
  switch (launcher) {
    case Launcher::Ssh:
      return "ssh";
    case Launcher::Slurm:
      return "slurm";
    case Launcher::Mpirun:
      return "mpirun";
  }
  return "ssh";
}

std::optional<Backend> parseBackend(std::string_view text) { return parseOne(kBackends, text); }
std::optional<Launcher> parseLauncher(std::string_view text) { return parseOne(kLaunchers, text); }
std::string backendChoices() { return choiceList(backendNames()); }
std::string launcherChoices() { return choiceList(launcherNames()); }
std::vector<std::string> backendNames() { return names(kBackends); }
std::vector<std::string> launcherNames() { return names(kLaunchers); }

}  // namespace pipestudio
