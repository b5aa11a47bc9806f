#pragma once
// Hostile trace files written at test time: gzip bombs (gigabytes in megabytes, without
// compressing gigabytes), Nsight Systems exports with whatever tables a case needs, trace
// streams cut or corrupted anywhere.
#include <sqlite3.h>
#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "Spawn.hpp"
#include "pipestudio/trace/Stream.hpp"

namespace hostile {

/// A gzip file holding prefix + `mebibytes` MiB of 'a' + suffix, about 1 KB per MiB: the
/// deflate blocks of one MiB of 'a' no longer depend on where they stand once the window holds
/// only 'a', so they are compressed once and repeated. A well-formed gzip member (CRC-32 and
/// length in its trailer) unless `withTrailer` is false.
inline std::string gzipBomb(const std::string& prefix, std::size_t mebibytes, const std::string& suffix,
                            bool withTrailer = true) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY);
  const auto deflateChunk = [&z](const std::string& in, int flush) {
    std::string out;
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = static_cast<uInt>(in.size());
    std::vector<char> buf(1 << 16);
    do {
      z.next_out = reinterpret_cast<Bytef*>(buf.data());
      z.avail_out = static_cast<uInt>(buf.size());
      deflate(&z, flush);
      out.append(buf.data(), buf.size() - z.avail_out);
    } while (z.avail_out == 0);
    return out;
  };
  const std::string mib(std::size_t{1} << 20, 'a');
  std::string out("\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff", 10);  // gzip header, no name, no mtime
  out += deflateChunk(prefix, Z_NO_FLUSH);
  out += deflateChunk(mib, Z_SYNC_FLUSH);  // the window now holds only 'a'
  const std::string block = deflateChunk(mib, Z_SYNC_FLUSH);
  for (std::size_t i = 1; i < mebibytes; ++i) out += block;
  out += deflateChunk(suffix, Z_FINISH);
  deflateEnd(&z);
  if (!withTrailer) return out;
  uLong crc = crc32(0, reinterpret_cast<const Bytef*>(prefix.data()), static_cast<uInt>(prefix.size()));
  const uLong crcMib = crc32(0, reinterpret_cast<const Bytef*>(mib.data()), static_cast<uInt>(mib.size()));
  for (std::size_t i = 0; i < mebibytes; ++i) crc = crc32_combine(crc, crcMib, static_cast<z_off_t>(mib.size()));
  crc = crc32_combine(crc, crc32(0, reinterpret_cast<const Bytef*>(suffix.data()), static_cast<uInt>(suffix.size())),
                      static_cast<z_off_t>(suffix.size()));
  const std::uint64_t length = prefix.size() + mebibytes * mib.size() + suffix.size();
  for (int i = 0; i < 4; ++i) out += static_cast<char>((crc >> (8 * i)) & 0xff);
  for (int i = 0; i < 4; ++i) out += static_cast<char>((length >> (8 * i)) & 0xff);
  return out;
}

/// `text` gzipped (a complete member, trailer included).
inline std::string gzip(const std::string& text) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, static_cast<uLong>(text.size())) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  return out;
}

/// Runs `sql` on a new SQLite file at `path` (the nsys exports of a case).
inline void writeSqlite(const std::string& path, const std::string& sql) {
  std::filesystem::remove(path);
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string message = err ? err : "?";
    sqlite3_free(err);
    sqlite3_close(db);
    throw std::runtime_error("writing " + path + ": " + message);
  }
  sqlite3_close(db);
}

/// The tables of an nsys export that the importer reads, with one kernel and one NVTX range
/// unless the case replaces them (a view, a hostile name).
inline std::string nsysSchema(bool kernelTable = true, bool stringIdsTable = true) {
  std::string sql =
      "CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);"
      "INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1750000000000000000, '', '');"
      "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, text TEXT, "
      "globalTid INTEGER, textId INTEGER);";
  if (stringIdsTable) {
    sql += "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);";
  }
  if (kernelTable) {
    sql +=
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER, deviceId INTEGER NOT NULL, "
        "streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL);";
  }
  return sql;
}

/// A stream's bytes: its start, a header, `frames`.
inline std::string streamBytes(const std::vector<pipestudio::trace::Frame>& frames) {
  std::vector<pipestudio::trace::Frame> all;
  pipestudio::trace::Header h;
  h.runId = "hostile";
  h.host = "node0";
  h.backend = "cpu";
  h.deviceName = "cpu";
  h.wallClockNs = 1'700'000'000'000'000'000;
  all.emplace_back(h);
  all.insert(all.end(), frames.begin(), frames.end());
  return pipestudio::trace::encodeStream(all);
}

}  // namespace hostile
