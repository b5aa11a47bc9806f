#pragma once
/// \file The executor backends and the cluster launchers, named once: every parser, option list,
/// combo box and error message takes its words from here (issue 18).

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipestudio {

/// How pipestudio-exec runs a plan: `cuda` one process per device (NCCL between them),
/// `cuda-single` every device of the plan on one GPU in one process, `cpu` a thread per device.
enum class Backend { Cuda, CudaSingle, Cpu };
inline constexpr std::array<Backend, 3> kBackends{Backend::Cuda, Backend::CudaSingle, Backend::Cpu};

/// How deploy starts the ranks on a cluster (pipestudio.hosts/1 "launcher").
enum class Launcher { Ssh, Slurm, Mpirun };
inline constexpr std::array<Launcher, 3> kLaunchers{Launcher::Ssh, Launcher::Slurm, Launcher::Mpirun};

std::string_view name(Backend backend);
std::string_view name(Launcher launcher);
std::optional<Backend> parseBackend(std::string_view text);
std::optional<Launcher> parseLauncher(std::string_view text);
/// "cuda, cuda-single or cpu": the choices, for "expected …" in error messages.
std::string backendChoices();
std::string launcherChoices();
/// The names in their listed order, for option checks and combo boxes.
std::vector<std::string> backendNames();
std::vector<std::string> launcherNames();

/// Processes a run of `devices` devices takes: one per device for cuda, one otherwise.
inline int ranksFor(Backend backend, int devices) { return backend == Backend::Cuda ? devices : 1; }

}  // namespace pipestudio
