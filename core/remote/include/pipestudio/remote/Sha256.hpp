#pragma once
/// \file SHA-256 of local files, compared with the remote `sha256sum` to skip uploads.

#include <string>
#include <string_view>

#include "pipestudio/common/Expected.hpp"

namespace pipestudio::remote {

/// Lower-case hex SHA-256 of `bytes` (FIPS 180-4).
std::string sha256Hex(std::string_view bytes);

/// Lower-case hex SHA-256 of a file's contents; errors name the file.
Expected<std::string> sha256File(const std::string& path);

}  // namespace pipestudio::remote
