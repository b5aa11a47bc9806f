#pragma once
// Private: the launcher sections of a hosts file (`slurm`, `mpirun`, keepalive), read by
// readHosts and written by hostsToJson (ModelIO.cpp).

#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/JsonReader.hpp"
#include "pipestudio/model/Hosts.hpp"

namespace pipestudio {

/// Reads `slurm`, `mpirun`, `server_alive_interval_s` and `server_alive_count_max` of the
/// hosts object `at` into `h` (whose launcher is already read); errors go to `r`.
void readLauncherSections(JsonReader& r, const JsonNode& at, HostsSpec& h);
/// The same fields for hostsToJson (only what differs from the defaults).
void writeLauncherSections(const HostsSpec& h, Json& j);

}  // namespace pipestudio
