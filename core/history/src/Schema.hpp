#pragma once
// Schema versions and forward migrations (PRAGMA user_version).

#include <sqlite3.h>

#include "pipestudio/common/Expected.hpp"

namespace pipestudio::history::detail {

/// 'PSTH': written to PRAGMA application_id so other SQLite files are recognised as foreign.
inline constexpr int kApplicationId = 0x50535448;

/// Applies migrations from+1 … to inside the caller's transaction and sets user_version.
Status migrate(sqlite3* db, int from, int to);

}  // namespace pipestudio::history::detail
