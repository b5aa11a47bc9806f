#pragma once
/// \file Byte sizes and durations as people write and read them.

#include <cstdint>
#include <string>
#include <string_view>

#include "pipestudio/common/Expected.hpp"

namespace pipestudio {

inline constexpr std::int64_t kKiB = 1024;
inline constexpr std::int64_t kMiB = 1024 * kKiB;
inline constexpr std::int64_t kGiB = 1024 * kMiB;

/// "40GiB", "512 MiB", "80GB", "1e9", "123" → bytes. Decimal units (KB, MB, GB, TB) are powers
/// of 1000, binary ones (KiB, MiB, GiB, TiB) powers of 1024.
Expected<std::int64_t> parseBytes(std::string_view text);
/// 1536 → "1.50 KiB".
std::string formatBytes(double bytes);
/// 0.0123 → "12.3 µs", 12.3 → "12.30 ms", 12345 → "12.35 s".
std::string formatMs(double ms);

}  // namespace pipestudio
