// Issue 27, the trace readers through the real `pipestudio-cli history import`: every string a
// reader keeps is bounded (gzip bombs stop at the limit), ids and clocks from a trace are
// bounded before anything is sized from them, a foreign SQLite file runs nothing of its own,
// a file that yields no run is a failed import (exit 1, nothing left behind), and what is not a
// trace is named for what it is.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "Spawn.hpp"
#include "TraceFiles.hpp"

using namespace hostile;
namespace fs = std::filesystem;
using pipestudio::OpKind;
namespace trace = pipestudio::trace;

namespace {

// A new, empty history for one case.
std::string freshDb(const std::string& name) {
  std::string db = (tempDir() / ("history-" + name + ".sqlite")).string();
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(db + suffix);
  return db;
}

std::string file(const std::string& name, const std::string& bytes) {
  std::string path = (tempDir() / name).string();
  spit(path, bytes);
  return path;
}

// The runs `history list --json` shows (parsed: a listing that is not JSON fails the test).
nlohmann::json listRuns(const std::string& db) {
  const auto r = cli({"history", "--db", db, "list", "--json"});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  return j.is_discarded() ? nlohmann::json::array() : j;
}

// An import that must fail: exit 1, `expected` in the message, and no run left behind.
void expectRefused(const std::vector<std::string>& files, const std::string& expected, const std::string& name) {
  const std::string db = freshDb(name);
  std::vector<std::string> args{"history", "--db", db, "import"};
  args.insert(args.end(), files.begin(), files.end());
  const auto r = cli(args);
  EXPECT_EQ(r.exitCode, 1) << name << ": " << r.out << r.err;
  EXPECT_NE(r.err.find(expected), std::string::npos) << name << ": " << r.err;
  if (fs::exists(db)) {
    EXPECT_TRUE(listRuns(db).empty()) << name << ": a failed import left a run";
  }
}

// A shell command running pipestudio-cli ARGS in 1 GiB of address space (paths without spaces).
std::string limitedCli(const std::vector<std::string>& args) {
  std::string command = "ulimit -v 1048576; exec ";
  command += kCli;
  for (const std::string& a : args) {
    command += ' ';
    command += a;
  }
  return command;
}

// A Kineto-like trace: one op annotation (or `ops`), one kernel.
std::string kineto(const std::string& events, const std::string& header = "") {
  return "{" + header + "\"traceEvents\": [" + events + "]}";
}

const std::string kKernel =
    R"({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 100, "dur": 10, "args": {"device": 0}})";

}  // namespace

// --- Crashes and unbounded memory ------------------------------------------------------------

TEST(TraceReaders, GzipBombsStopAtTheStringLimitUnderOneGibibyte) {
  // 3 GB of one string, one args value, one object key; each file is ~3 MB.
  const std::vector<std::pair<std::string, std::string>> bombs{
      {R"({"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "name": ")", R"("}]})"},
      {R"({"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "name": "k", "args": {"v": ")", R"("}}]})"},
      {R"({"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, ")", R"(": 1}]})"},
  };
  int i = 0;
  for (const auto& [prefix, suffix] : bombs) {
    const std::string bomb = file("bomb" + std::to_string(i) + ".json.gz", gzipBomb(prefix, 3000, suffix));
    EXPECT_LT(fs::file_size(bomb), 4u << 20);
    const std::string db = freshDb("bomb" + std::to_string(i++));
    // 1 GiB of address space: inflating the string whole would need 3.
    const auto r = run({"/bin/sh", "-c", limitedCli({"history", "--db", db, "import", bomb})},
                       {.stdinPath = "/dev/null", .stdoutPath = "", .deadlineS = 120});
    EXPECT_EQ(r.exitCode, 1) << r.err;
    EXPECT_NE(r.err.find("string longer than 1048576 bytes"), std::string::npos) << r.err;
    EXPECT_TRUE(listRuns(db).empty());
  }
}

TEST(TraceReaders, IdsFromATraceAreBoundedAtImportSoShowAndExportRunCannotBlowUp) {
  // args.virtual_stage 2^31 − 1 on an op event; a PP: annotation naming stage 999999999.
  const std::string chrome =
      file("big-stage.json", kineto(R"({"ph": "X", "cat": "cpu_op", "name": "F", "pid": 0, "tid": 1, "ts": 1, "dur": 5,
                 "args": {"kind": "F", "device": 0, "virtual_stage": 2147483647, "microbatch": 0}},
                {"ph": "X", "cat": "user_annotation", "name": "PP:999999999F0", "pid": 0, "tid": 1, "ts": 10, "dur": 5},
                {"ph": "X", "cat": "user_annotation", "name": "PP:0F999999999", "pid": 0, "tid": 1, "ts": 20, "dur": 5},
                {"ph": "X", "cat": "cpu_op", "name": "F", "pid": 0, "tid": 1, "ts": 30, "dur": 5,
                 "args": {"kind": "F", "device": 0, "virtual_stage": 0, "microbatch": 0}},)" +
                                    kKernel));
  const std::string nsys = (tempDir() / "big-stage.sqlite").string();
  // The valid op is placed on its kernel's device through the CUDA API call inside it.
  writeSqlite(nsys, nsysSchema() +
                        "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                        "globalTid INTEGER, correlationId INTEGER);"
                        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (60, 70, 1, 1);"
                        "INSERT INTO StringIds VALUES (1, 'gemm');"
                        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (100, 200, 0, 7, 1, 0, 1);"
                        "INSERT INTO NVTX_EVENTS VALUES (50, 300, 59, 'PP:0F0', 1, NULL);"
                        "INSERT INTO NVTX_EVENTS VALUES (400, 500, 59, 'PP:999999999F0', 1, NULL);");
  for (const std::string& trace : {chrome, nsys}) {
    const std::string db = freshDb("ids");
    const auto r = cli({"history", "--db", db, "import", trace, "--json"});
    ASSERT_EQ(r.exitCode, 0) << r.err;
    EXPECT_NE(r.err.find("is out of range (expected -1..1999999)"), std::string::npos) << r.err;
    const auto show = cli({"history", "--db", db, "show", "1", "--json"});
    EXPECT_EQ(show.exitCode, 0) << show.err;
    const std::string out = (tempDir() / "ids-export.json").string();
    const auto exported = cli({"export", "--run", "1", "--db", db, "--format", "chrome", "-o", out});
    EXPECT_EQ(exported.exitCode, 0) << exported.err;
  }
}

TEST(TraceReaders, NsysViewsAreNotRunAndLongValuesAreRefused) {
  // A kernel table that is a view over an endless recursive CTE: refused by what it is, at once.
  const std::string endless = (tempDir() / "endless-view.sqlite").string();
  writeSqlite(endless, nsysSchema(false) +
                           "CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
                           "SELECT x + 1 FROM c) SELECT x AS start, x + 1 AS end, 0 AS deviceId, 0 AS streamId, "
                           "x AS correlationId, 0 AS globalPid, 1 AS demangledName FROM c;");
  expectRefused({endless}, "CUPTI_ACTIVITY_KIND_KERNEL is a view, not a table", "endless-view");
  // A StringIds view yielding a 600 MB string from an 8 KB file.
  const std::string huge = (tempDir() / "huge-view.sqlite").string();
  writeSqlite(huge, nsysSchema(true, false) +
                        "CREATE VIEW StringIds AS SELECT 1 AS id, printf('%.*c', 600000000, 'x') AS value;"
                        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (100, 200, 0, 7, 1, 0, 1);");
  expectRefused({huge}, "StringIds is a view, not a table", "huge-view");
  // A 600 MB string from a generated column of a real table: the length limit stops it.
  const std::string generated = (tempDir() / "huge-generated.sqlite").string();
  writeSqlite(generated, nsysSchema(true, false) +
                             "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, n INTEGER, value TEXT GENERATED ALWAYS "
                             "AS (hex(zeroblob(n))));"
                             "INSERT INTO StringIds(id, n) VALUES (1, 300000000);"
                             "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (100, 200, 0, 7, 1, 0, 1);");
  const std::string db = freshDb("huge-generated");
  const auto r = run({"/bin/sh", "-c", limitedCli({"history", "--db", db, "import", generated})},
                     {.stdinPath = "/dev/null", .stdoutPath = "", .deadlineS = 60});
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_NE(r.err.find("longer than 1048576 bytes"), std::string::npos) << r.err;
}

// --- Success reported on failure --------------------------------------------------------------

TEST(TraceReaders, StreamsWithoutACompleteHeaderAreFailedImports) {
  const std::string whole = streamBytes({trace::OpRange{false, 0, 0, OpKind::F, 0, 0, 10, 20}});
  std::string magicOnly;
  trace::encodeStreamStart(magicOnly);
  std::string corrupt = whole;
  corrupt[8] = 99;  // the header frame's type byte
  const std::vector<std::pair<std::string, std::string>> cases{
      {"magic-only", magicOnly},
      {"magic-cut", magicOnly.substr(0, 6)},
      {"cut-in-header", whole.substr(0, 20)},
      {"corrupt-header", corrupt},
  };
  for (const auto& [name, bytes] : cases) {
    expectRefused({file(name + ".pstrace", bytes)}, "nothing imported", name);
  }
  // A stream cut after its header and some events still imports them, marked incomplete.
  const std::string db = freshDb("stream-cut-late");
  const auto r = cli({"history", "--db", db, "import", file("cut-late.pstrace", whole.substr(0, whole.size() - 3))});
  EXPECT_EQ(r.exitCode, 1) << r.err;  // the only event is the cut one: nothing to keep
  const std::string twoEvents = streamBytes(
      {trace::OpRange{false, 0, 0, OpKind::F, 0, 0, 10, 20}, trace::OpRange{false, 0, 0, OpKind::B, 0, 0, 30, 40}});
  const auto late =
      cli({"history", "--db", db, "import", file("cut-late2.pstrace", twoEvents.substr(0, twoEvents.size() - 3))});
  EXPECT_EQ(late.exitCode, 0) << late.err;
  const auto runs = listRuns(db);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0]["status"], "incomplete");
  EXPECT_EQ(runs[0]["events"], 1);
}

TEST(TraceReaders, AChromeTraceWhoseEveryEventIsInvalidIsAFailedImport) {
  const std::string invalid = file("all-invalid.json", kineto(R"({"ph": "X", "name": "a", "ts": "soon", "dur": 1},
      {"ph": "X", "name": "b", "ts": 1}, {"ph": "X", "name": "c", "ts": 1, "dur": -5})"));
  expectRefused({invalid}, "no event could be stored: 3 event(s) skipped", "all-invalid");
}

TEST(TraceReaders, AGzipWithoutItsTrailerIsAFailedImport) {
  const std::string text = kineto(kKernel);
  std::string gz = gzip(text);
  gz.resize(gz.size() - 8);  // CRC-32 and length gone: the JSON inside is complete
  expectRefused({file("no-trailer.json.gz", gz)}, "gzip", "no-trailer");
  std::string badCrc = gzip(text);
  badCrc[badCrc.size() - 8] ^= 0x55;
  expectRefused({file("bad-crc.json.gz", badCrc)}, "gzip", "bad-crc");
}

TEST(TraceReaders, ClockBasesAndIdsAreCheckedNotWrappedOrNarrowed) {
  // Two ranks at the ends of int64: refused by the number, never a negative start.
  const std::string max = file("base-max.json", kineto(kKernel, R"("baseTimeNanoseconds": 9223372036854775807, )"));
  const std::string min = file("base-min.json", kineto(kKernel, R"("baseTimeNanoseconds": -9223372036854775808, )"));
  expectRefused({max, min}, "baseTimeNanoseconds 9223372036854775807 is out of range", "base-extremes");
  expectRefused({min}, "baseTimeNanoseconds -9223372036854775808 is out of range", "base-min");
  // args.device 4294967297 is not device 1.
  const std::string db = freshDb("device-narrowing");
  const std::string wide =
      file("device-wide.json", kineto(R"({"ph": "X", "cat": "kernel", "name": "wide", "pid": 0, "tid": 7, "ts": 1,
                                           "dur": 1, "args": {"device": 4294967297}}, )" +
                                      kKernel));
  const auto r = cli({"history", "--db", db, "import", wide, "--json"});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.err.find("device 4294967297 is out of range"), std::string::npos) << r.err;
  const auto show = cli({"history", "--db", db, "show", "1", "--json"});
  auto j = nlohmann::json::parse(show.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << show.out;
  EXPECT_EQ(j["events"], 1);
  EXPECT_EQ(j["devices"], 1);
}

// --- Terminal safety and messages --------------------------------------------------------------

TEST(TraceReaders, KernelNamesWithControlCharactersAreEscapedByCompare) {
  const std::string chrome =
      file("esc-names.json",
           kineto(R"({"ph": "X", "cat": "kernel", "name": "evil\u001b[2J\u0007\nkernel", "pid": 0, "tid": 7, "ts": 1,
                 "dur": 1, "args": {"device": 0}})"));
  const std::string nsys = (tempDir() / "esc-names.sqlite").string();
  writeSqlite(nsys, nsysSchema() +
                        "INSERT INTO StringIds VALUES (1, 'evil' || char(27) || '[2J' || char(7) || char(10) || "
                        "'kernel');"
                        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (100, 200, 0, 7, 1, 0, 1);");
  for (const std::string& trace : {chrome, nsys}) {
    const std::string db = freshDb("esc-names");
    ASSERT_EQ(cli({"history", "--db", db, "import", trace}).exitCode, 0);
    const auto c = cli({"history", "--db", db, "compare", "1", "1"});
    EXPECT_EQ(c.exitCode, 0) << c.err;
    EXPECT_EQ(c.out.find('\x1b'), std::string::npos) << c.out;
    EXPECT_EQ(c.out.find('\x07'), std::string::npos) << c.out;
    EXPECT_NE(c.out.find("evil\\e[2J\\x07\\nkernel"), std::string::npos) << c.out;
  }
}

TEST(TraceReaders, WhatIsNotATraceIsNamedForWhatItIs) {
  std::string utf16 = "\xFF\xFE";
  for (const char c : kineto(kKernel)) utf16 += std::string{c, '\0'};
  expectRefused({file("utf16.json", utf16)}, "is UTF-16 (little-endian) text", "utf16");
  std::string utf16NoBom;
  for (const char c : kineto(kKernel)) utf16NoBom += std::string{c, '\0'};
  expectRefused({file("utf16-nobom.json", utf16NoBom)}, "UTF-16 (little-endian) text without a byte order mark",
                "utf16-nobom");
  expectRefused({file("utf16.json.gz", gzip(utf16))}, "UTF-16 (little-endian) text", "utf16-gz");
  expectRefused({file("notes.sqlite", "true story: this is a text file\n")},
                "is text, not a trace: it begins 'true story: this is a text file'", "text-sqlite");
  expectRefused({file("notes2.sqlite", "plain text\n")}, "its name says SQLite, but it has no SQLite header",
                "text-sqlite-name");
  expectRefused({file("binary.json", std::string("\x7f"
                                                 "ELF\x02\x01\x01\0",
                                                 8))},
                "is binary data, not a trace", "binary");
}

TEST(TraceReaders, NonUtf8TextFromAnNsysExportKeepsListingsAndComparisonsValidJson) {
  const std::string nsys = (tempDir() / "latin1.sqlite").string();
  writeSqlite(nsys,
              nsysSchema() +
                  "INSERT INTO StringIds VALUES (1, CAST(X'67656d6dff5f6b65726e656c' AS TEXT));"  // gemm\xff_kernel
                  "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (100, 200, 0, 7, 1, 0, 1);"
                  "INSERT INTO NVTX_EVENTS VALUES (50, 300, 59, CAST(X'73746570e9' AS TEXT), 1, NULL);");
  const std::string db = freshDb("latin1");
  ASSERT_EQ(cli({"history", "--db", db, "import", nsys, "--name", std::string("r\xe9sum\xe9")}).exitCode, 0);
  const auto runs = listRuns(db);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0]["name"], "r\xEF\xBF\xBDsum\xEF\xBF\xBD");
  const auto c = cli({"history", "--db", db, "compare", "1", "1", "--json"});
  ASSERT_EQ(c.exitCode, 0) << c.err;
  auto j = nlohmann::json::parse(c.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << c.out;
  EXPECT_NE(c.out.find("gemm\xEF\xBF\xBD_kernel"), std::string::npos) << c.out;
}
