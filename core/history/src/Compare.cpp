#include "pipestudio/history/Compare.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <ctime>
#include <iomanip>
#include <map>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "Impl.hpp"
#include "Sqlite.hpp"
#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/plan/Dependencies.hpp"
#include "pipestudio/plan/Memory.hpp"

namespace pipestudio::history {

using detail::Statement;

namespace {

constexpr double kNsPerMs = 1e6;

struct Interval {
  std::int64_t start;
  std::int64_t end;
};

// Sorts and merges overlapping intervals in place; returns the covered length.
std::int64_t unionInPlace(std::vector<Interval>& v) {
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  std::size_t out = 0;
  std::int64_t total = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (out > 0 && v[i].start <= v[out - 1].end) {
      v[out - 1].end = std::max(v[out - 1].end, v[i].end);
    } else {
      v[out++] = v[i];
    }
  }
  v.resize(out);
  for (const auto& i : v) total += i.end - i.start;
  return total;
}

// Length of [a, b) covered by a merged, sorted interval list.
std::int64_t covered(const std::vector<Interval>& merged, std::int64_t a, std::int64_t b) {
  if (b <= a || merged.empty()) return 0;
  auto it =
      std::upper_bound(merged.begin(), merged.end(), a, [](std::int64_t t, const Interval& i) { return t < i.end; });
  std::int64_t total = 0;
  for (; it != merged.end() && it->start < b; ++it) total += std::min(b, it->end) - std::max(a, it->start);
  return total;
}

bool isGpuActivity(int category) {
  return category == static_cast<int>(EventCategory::Kernel) || category == static_cast<int>(EventCategory::Memcpy) ||
         category == static_cast<int>(EventCategory::Memset) || category == static_cast<int>(EventCategory::Nccl);
}

// One pass over a run's events (primary-key range scan) into the aggregates compare needs.
struct RunAggregate {
  std::unordered_map<std::int64_t, std::pair<std::int64_t, std::int64_t>> byNameId;  // total ns, count
  std::map<int, std::vector<Interval>> opIntervals;
  std::map<int, std::vector<Interval>> gpuIntervals;
  std::map<int, std::pair<std::int64_t, std::int64_t>> iterationWindow;  // from op ranges
};

Expected<RunAggregate> aggregateRun(HistoryStore& store, RunId run) {
  sqlite3* db = store.connection();
  Statement st(db, "SELECT category, device, name_id, start_ns, dur_ns, iteration FROM events WHERE " RUN_EVENT_RANGE,
               nullptr);
  if (!st) return Error{store.path() + ": " + detail::lastError(db)};
  st.bind(1, run);
  RunAggregate agg;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) {
    const int category = st.i32(0);
    const int device = st.i32(1);
    const std::int64_t start = st.i64(3);
    const std::int64_t dur = std::max<std::int64_t>(0, st.i64(4));
    auto& n = agg.byNameId[st.i64(2)];
    n.first += dur;
    ++n.second;
    if (device < 0) continue;
    if (category == static_cast<int>(EventCategory::Op)) {
      agg.opIntervals[device].push_back({start, start + dur});
      if (!st.isNull(5)) {
        auto [it, inserted] = agg.iterationWindow.try_emplace(st.i32(5), start, start + dur);
        if (!inserted) {
          it->second.first = std::min(it->second.first, start);
          it->second.second = std::max(it->second.second, start + dur);
        }
      }
    } else if (isGpuActivity(category)) {
      agg.gpuIntervals[device].push_back({start, start + dur});
    }
  }
  if (rc != SQLITE_DONE) return Error{store.path() + ": " + detail::lastError(db)};
  return agg;
}

struct BusyIdle {
  double busyMs = 0;
  double idleMs = 0;
};

std::map<int, BusyIdle> busyIdle(RunAggregate& agg) {
  std::map<int, BusyIdle> out;
  auto account = [&out](int device, std::vector<Interval>& v) {
    if (v.empty()) return;
    const std::int64_t busy = unionInPlace(v);
    const std::int64_t span = v.back().end - v.front().start;
    out[device] = {static_cast<double>(busy) / kNsPerMs, static_cast<double>(span - busy) / kNsPerMs};
  };
  for (auto& [device, v] : agg.opIntervals) account(device, v);
  for (auto& [device, v] : agg.gpuIntervals) {
    if (!agg.opIntervals.count(device)) account(device, v);
  }
  return out;
}

Expected<std::unordered_map<std::int64_t, std::string>> namesOf(HistoryStore& store, const RunAggregate& a,
                                                                const RunAggregate& b) {
  std::unordered_map<std::int64_t, std::string> out;
  Statement st(store.connection(), "SELECT name FROM names WHERE id = ?1", nullptr);
  if (!st) return Error{store.path() + ": " + detail::lastError(store.connection())};
  for (const auto* agg : {&a, &b}) {
    for (const auto& [id, v] : agg->byNameId) {
      if (out.count(id)) continue;
      st.bind(1, id);
      const int rc = st.step();
      if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return Error{store.path() + ": " + detail::lastError(store.connection())};
      out[id] = rc == SQLITE_ROW ? st.text(0) : "#" + std::to_string(id);
      st.reset();
    }
  }
  return out;
}

Expected<StepStats> runSteps(HistoryStore& store, RunId run, const RunAggregate& agg) {
  PS_ASSIGN_OR_RETURN(auto steps, store.stepTimesMs(run));
  if (steps.empty()) {
    // No recorded step times: each iteration's op window is its step.
    for (const auto& [iteration, w] : agg.iterationWindow) {
      if (iteration >= 0) steps.push_back(static_cast<double>(w.second - w.first) / kNsPerMs);
    }
  }
  return stepStats(std::move(steps));
}

Json stepJson(const StepStats& s) {
  if (s.count == 0) return nullptr;
  return Json{{"count", s.count},  {"mean_ms", s.meanMs}, {"median_ms", s.medianMs},
              {"min_ms", s.minMs}, {"max_ms", s.maxMs},   {"stddev_ms", s.stddevMs}};
}

std::string fixed(double v, int digits = 3) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(digits) << v;
  return o.str();
}

std::string pad(std::string s, std::size_t width, bool right = true) {
  if (s.size() > width) {
    // Cut at a UTF-8 boundary: half a character would make the line invalid text.
    std::size_t cut = width - 1;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    s = s.substr(0, cut) + "~";
  }
  const std::string fill(width - s.size(), ' ');
  return right ? fill + s : s + fill;
}

struct OpKey {
  int iteration, virtualStage, kind, microbatch;
  bool operator<(const OpKey& o) const {
    return std::tie(iteration, virtualStage, kind, microbatch) <
           std::tie(o.iteration, o.virtualStage, o.kind, o.microbatch);
  }
};

}  // namespace

StepStats stepStats(std::vector<double> stepsMs) {
  StepStats s;
  if (stepsMs.empty()) return s;
  std::sort(stepsMs.begin(), stepsMs.end());
  s.count = static_cast<int>(stepsMs.size());
  double sum = 0;
  for (double v : stepsMs) sum += v;
  s.meanMs = sum / s.count;
  const std::size_t n = stepsMs.size();
  s.medianMs = n % 2 ? stepsMs[n / 2] : 0.5 * (stepsMs[n / 2 - 1] + stepsMs[n / 2]);
  s.minMs = stepsMs.front();
  s.maxMs = stepsMs.back();
  double var = 0;
  for (double v : stepsMs) var += (v - s.meanMs) * (v - s.meanMs);
  s.stddevMs = n > 1 ? std::sqrt(var / static_cast<double>(n - 1)) : 0.0;
  return s;
}

std::string formatUnixMs(std::int64_t unixMs) {
  const auto seconds = static_cast<std::time_t>(unixMs / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  std::array<char, 32> buf{};
  std::strftime(buf.data(), buf.size(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf.data();
}

Json runSummaryToJson(const RunSummary& s) {
  return Json{{"id", s.id},
              {"name", s.name},
              {"status", std::string(runStatusName(s.status))},
              {"events", s.events},
              {"created", formatUnixMs(s.createdUnixMs)},
              {"created_unix_ms", s.createdUnixMs},
              {"plan", s.planId ? Json(*s.planId) : Json(nullptr)},
              {"source", s.source},
              {"source_path", s.sourcePath},
              {"user", s.user},
              {"host", s.host},
              {"backend", s.backend},
              {"gpu", s.gpu},
              {"executor_version", s.executorVersion},
              {"devices", s.devices},
              {"iterations", s.iterations},
              {"duration_ms", s.durationMs},
              {"notes", s.notes},
              {"error", s.error}};
}

Expected<RunComparison> compareRuns(HistoryStore& store, RunId a, RunId b) {
  PS_RETURN_IF_ERROR(store.flush());
  RunComparison c;
  PS_ASSIGN_OR_RETURN(auto sa, store.runSummary(a));
  PS_ASSIGN_OR_RETURN(auto sb, store.runSummary(b));
  c.a = std::move(sa);
  c.b = std::move(sb);
  PS_ASSIGN_OR_RETURN(auto aggA, aggregateRun(store, a));
  PS_ASSIGN_OR_RETURN(auto aggB, aggregateRun(store, b));
  PS_ASSIGN_OR_RETURN(auto names, namesOf(store, aggA, aggB));

  std::map<std::string, NameComparison> byName;
  for (const auto& [id, v] : aggA.byNameId) {
    auto& row = byName[names[id]];
    row.aMs += static_cast<double>(v.first) / kNsPerMs;
    row.aCount += v.second;
  }
  for (const auto& [id, v] : aggB.byNameId) {
    auto& row = byName[names[id]];
    row.bMs += static_cast<double>(v.first) / kNsPerMs;
    row.bCount += v.second;
  }
  for (auto& [name, row] : byName) {
    row.name = name;
    row.deltaMs = row.bMs - row.aMs;
    c.byName.push_back(row);
  }
  std::sort(c.byName.begin(), c.byName.end(), [](const NameComparison& x, const NameComparison& y) {
    const double mx = std::max(x.aMs, x.bMs), my = std::max(y.aMs, y.bMs);
    return mx != my ? mx > my : x.name < y.name;
  });

  PS_ASSIGN_OR_RETURN(c.stepA, runSteps(store, a, aggA));
  PS_ASSIGN_OR_RETURN(c.stepB, runSteps(store, b, aggB));

  const auto da = busyIdle(aggA);
  const auto dbi = busyIdle(aggB);
  std::map<int, DeviceComparison> devices;
  for (const auto& [d, v] : da) {
    devices[d].aBusyMs = v.busyMs;
    devices[d].aIdleMs = v.idleMs;
  }
  for (const auto& [d, v] : dbi) {
    devices[d].bBusyMs = v.busyMs;
    devices[d].bIdleMs = v.idleMs;
  }
  for (auto& [d, row] : devices) {
    row.device = d;
    c.byDevice.push_back(row);
  }
  return c;
}

Json comparisonToJson(const RunComparison& c) {
  Json byName = Json::array();
  for (const auto& r : c.byName) {
    byName.push_back({{"name", r.name},
                      {"a_ms", r.aMs},
                      {"b_ms", r.bMs},
                      {"delta_ms", r.deltaMs},
                      {"a_count", r.aCount},
                      {"b_count", r.bCount}});
  }
  Json byDevice = Json::array();
  for (const auto& r : c.byDevice) {
    byDevice.push_back({{"device", r.device},
                        {"a_busy_ms", r.aBusyMs},
                        {"b_busy_ms", r.bBusyMs},
                        {"a_idle_ms", r.aIdleMs},
                        {"b_idle_ms", r.bIdleMs}});
  }
  Json step{{"a", stepJson(c.stepA)}, {"b", stepJson(c.stepB)}};
  step["delta_mean_ms"] = c.stepA.count && c.stepB.count ? Json(c.stepB.meanMs - c.stepA.meanMs) : Json(nullptr);
  return Json{{"a", runSummaryToJson(c.a)},
              {"b", runSummaryToJson(c.b)},
              {"by_name", byName},
              {"by_device", byDevice},
              {"step", step}};
}

std::string comparisonTable(const RunComparison& c) {
  std::ostringstream o;
  // Names come from traces and users: escaped as every listing escapes them, so a kernel name
  // holding ESC or a newline can neither drive the terminal nor break a row.
  o << "A: run " << c.a.id << " '" << excerpt(c.a.name, 200) << "' (" << runStatusName(c.a.status) << ", " << c.a.events
    << " events)\nB: run " << c.b.id << " '" << excerpt(c.b.name, 200) << "' (" << runStatusName(c.b.status) << ", "
    << c.b.events << " events)\n\n";
  if (c.stepA.count || c.stepB.count) {
    o << "step time (ms)      " << pad("A", 12) << pad("B", 12) << pad("delta", 12) << '\n';
    auto line = [&o, &c](const char* what, double x, double y) {
      o << pad(what, 19, false) << pad(c.stepA.count ? fixed(x) : "-", 12) << pad(c.stepB.count ? fixed(y) : "-", 12)
        << pad(c.stepA.count && c.stepB.count ? fixed(y - x) : "-", 12) << '\n';
    };
    line("mean", c.stepA.meanMs, c.stepB.meanMs);
    line("median", c.stepA.medianMs, c.stepB.medianMs);
    line("min", c.stepA.minMs, c.stepB.minMs);
    line("max", c.stepA.maxMs, c.stepB.maxMs);
    o << '\n';
  }
  o << pad("device", 6) << pad("A busy ms", 14) << pad("B busy ms", 14) << pad("A idle ms", 14) << pad("B idle ms", 14)
    << '\n';
  for (const auto& r : c.byDevice) {
    o << pad(std::to_string(r.device), 6) << pad(fixed(r.aBusyMs), 14) << pad(fixed(r.bBusyMs), 14)
      << pad(fixed(r.aIdleMs), 14) << pad(fixed(r.bIdleMs), 14) << '\n';
  }
  o << '\n'
    << pad("name", 40, false) << pad("A ms", 13) << pad("B ms", 13) << pad("delta ms", 13) << pad("A n", 9)
    << pad("B n", 9) << '\n';
  std::size_t shown = 0;
  for (const auto& r : c.byName) {
    if (++shown > 30) {
      o << "… " << c.byName.size() - 30 << " more names (use --json)\n";
      break;
    }
    o << pad(escapeControl(r.name), 40, false) << pad(fixed(r.aMs), 13) << pad(fixed(r.bMs), 13)
      << pad(fixed(r.deltaMs), 13) << pad(std::to_string(r.aCount), 9) << pad(std::to_string(r.bCount), 9) << '\n';
  }
  return o.str();
}

// ---- run vs plan --------------------------------------------------------------------------

namespace {

// ---- NCCL waits ---------------------------------------------------------------------------

// NCCL send/recv kernels start when launched and wait inside for their peer. Pairs are found
// through torch.distributed.pipelining's SEND/RECV annotations (stored as host ranges naming
// stage and microbatch): each annotation claims the first NCCL kernel on its device starting
// at or after it; SEND_F of stage s and RECV_F of stage s+1 (SEND_B of s and RECV_B of s-1) for
// the same microbatch and iteration are one transfer. Of a pair, the kernel that started
// first waited until the other started. Kernels without a pair count as transfer.
struct NcclParts {
  std::map<int, std::vector<Interval>> transfer;  ///< per device: the kernels' transfer parts
  std::map<int, std::vector<Interval>> wait;      ///< per device: the waiting parts
};

Expected<NcclParts> ncclParts(HistoryStore& store, RunId run) {
  sqlite3* db = store.connection();
  Statement st(db,
               "SELECT e.category, e.device, n.name, e.start_ns, e.dur_ns, e.virtual_stage, e.microbatch, e.iteration "
               "FROM events e JOIN names n ON n.id = e.name_id WHERE e." RUN_EVENT_RANGE
               " AND e.device >= 0 AND (e.category = ?2 OR (e.category = ?3 AND e.virtual_stage >= 0))",
               nullptr);
  if (!st) return Error{store.path() + ": " + detail::lastError(db)};
  st.bind(1, run);
  st.bind(2, static_cast<int>(EventCategory::Nccl));
  st.bind(3, static_cast<int>(EventCategory::Cpu));
  struct Kernel {
    std::int64_t start, end;
    bool claimed = false;
    std::int64_t peerStart = -1;
  };
  struct Annotation {
    std::int64_t start;
    char dir;
    int senderStage, microbatch, iteration;
    bool send;
  };
  std::map<int, std::vector<Kernel>> kernels;
  std::map<int, std::vector<Annotation>> annotations;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) {
    const int device = st.i32(1);
    const std::int64_t start = st.i64(3);
    const std::int64_t end = start + std::max<std::int64_t>(0, st.i64(4));
    if (st.i32(0) == static_cast<int>(EventCategory::Nccl)) {
      kernels[device].push_back({start, end});
      continue;
    }
    const std::string name = st.text(2);
    const int stage = st.i32(5);
    const bool send = name == "SEND_F" || name == "SEND_B";
    const bool forward = name == "SEND_F" || name == "RECV_F";
    if (!send && name != "RECV_F" && name != "RECV_B") continue;
    const int sender = send ? stage : forward ? stage - 1 : stage + 1;
    annotations[device].push_back({start, forward ? 'F' : 'B', sender, st.i32(6), st.isNull(7) ? -1 : st.i32(7), send});
  }
  if (rc != SQLITE_DONE) return Error{store.path() + ": " + detail::lastError(db)};
  std::map<std::tuple<char, int, int, int>, std::pair<Kernel*, Kernel*>> pairs;  // (send, recv)
  for (auto& [device, list] : annotations) {
    auto& ks = kernels[device];
    std::sort(ks.begin(), ks.end(), [](const Kernel& a, const Kernel& b) { return a.start < b.start; });
    std::sort(list.begin(), list.end(), [](const Annotation& a, const Annotation& b) { return a.start < b.start; });
    std::size_t k = 0;
    for (const Annotation& a : list) {
      while (k < ks.size() && (ks[k].start < a.start || ks[k].claimed)) ++k;
      if (k >= ks.size()) break;
      ks[k].claimed = true;
      auto& slot = pairs[{a.dir, a.senderStage, a.microbatch, a.iteration}];
      (a.send ? slot.first : slot.second) = &ks[k];
      ++k;
    }
  }
  for (auto& [key, pr] : pairs) {
    if (pr.first && pr.second) {
      pr.first->peerStart = pr.second->start;
      pr.second->peerStart = pr.first->start;
    }
  }
  NcclParts out;
  for (auto& [device, ks] : kernels) {
    for (const Kernel& k : ks) {
      const std::int64_t ready = std::clamp(k.peerStart, k.start, k.end);
      if (k.peerStart > k.start) out.wait[device].push_back({k.start, ready});
      out.transfer[device].push_back({k.peerStart > k.start ? ready : k.start, k.end});
    }
  }
  return out;
}

// Length of [a, b) covered by a sorted interval list whose intervals may overlap each other.
std::int64_t coveredSum(const std::vector<Interval>& sorted, std::int64_t a, std::int64_t b) {
  std::int64_t total = 0;
  for (const Interval& i : sorted) {
    if (i.start >= b) break;
    total += std::max<std::int64_t>(0, std::min(b, i.end) - std::max(a, i.start));
  }
  return total;
}

using Window = std::pair<std::int64_t, std::int64_t>;  // [first start, last end) in ns
using DeviceIntervals = std::map<int, std::vector<Interval>>;
using DeviceWindows = std::map<int, std::vector<Window>>;  // per device, per iteration

// The measured ops of a run: per (device, stage, kind, microbatch), summed over iterations at
// times relative to that iteration's first op start.
struct MeasuredOp {
  double startMs = 0, durMs = 0;
  int n = 0;
  bool matched = false;
};
struct MeasuredOps {
  int iterations = 0;
  std::map<std::tuple<int, int, int, int>, MeasuredOp> ops;
  std::map<std::pair<int, int>, Window> windows;  // (device, iteration) → its ops' window
};

MeasuredOps measureOps(const std::vector<MeasuredEvent>& events) {
  MeasuredOps m;
  std::map<int, std::int64_t> iterationStart;
  for (const auto& e : events) {
    auto [it, inserted] = iterationStart.try_emplace(e.iteration, e.startNs);
    if (!inserted) it->second = std::min(it->second, e.startNs);
  }
  m.iterations = static_cast<int>(iterationStart.size());
  for (const auto& e : events) {
    auto& acc = m.ops[{e.device, e.virtualStage, e.kind, e.microbatch}];
    acc.startMs += static_cast<double>(e.startNs - iterationStart[e.iteration]) / kNsPerMs;
    acc.durMs += static_cast<double>(e.durationNs) / kNsPerMs;
    ++acc.n;
    auto [it, inserted] = m.windows.try_emplace({e.device, e.iteration}, e.startNs, e.startNs + e.durationNs);
    if (!inserted) {
      it->second.first = std::min(it->second.first, e.startNs);
      it->second.second = std::max(it->second.second, e.startNs + e.durationNs);
    }
  }
  return m;
}

// Each planned op against its measured mean; counts the ops found on one side only.
void matchOps(const Plan& plan, MeasuredOps& m, PlanComparison& c) {
  double planStart = plan.ops.empty() ? 0.0 : plan.ops.front().startMs;
  for (const Op& op : plan.ops) planStart = std::min(planStart, op.startMs);
  for (const Op& op : plan.ops) {
    auto it = m.ops.find({op.device, op.virtualStage, static_cast<int>(op.kind), op.microbatch});
    if (it == m.ops.end() || it->second.n == 0) {
      ++c.unmatchedPlanned;
      continue;
    }
    it->second.matched = true;
    OpDrift d;
    d.device = op.device;
    d.virtualStage = op.virtualStage;
    d.kind = op.kind;
    d.microbatch = op.microbatch;
    d.plannedStartMs = op.startMs - planStart;
    d.plannedMs = op.durationMs();
    d.iterations = it->second.n;
    d.measuredStartMs = it->second.startMs / it->second.n;
    d.measuredMs = it->second.durMs / it->second.n;
    d.startDriftMs = d.measuredStartMs - d.plannedStartMs;
    d.durationDeltaMs = d.measuredMs - d.plannedMs;
    c.ops.push_back(d);
  }
  for (const auto& [key, acc] : m.ops) {
    if (!acc.matched) c.unmatchedMeasured += acc.n;
  }
}

// The most drifted and the latest ops (at most mostDriftedCount each), and mean times per kind.
void rankDrifts(PlanComparison& c, int mostDriftedCount) {
  c.mostDrifted = c.ops;
  std::sort(c.mostDrifted.begin(), c.mostDrifted.end(), [](const OpDrift& x, const OpDrift& y) {
    return std::fabs(x.startDriftMs) + std::fabs(x.durationDeltaMs) >
           std::fabs(y.startDriftMs) + std::fabs(y.durationDeltaMs);
  });
  if (static_cast<int>(c.mostDrifted.size()) > mostDriftedCount)
    c.mostDrifted.resize(static_cast<std::size_t>(std::max(0, mostDriftedCount)));

  c.latest = c.ops;
  std::sort(c.latest.begin(), c.latest.end(),
            [](const OpDrift& x, const OpDrift& y) { return x.startDriftMs > y.startDriftMs; });
  if (static_cast<int>(c.latest.size()) > mostDriftedCount)
    c.latest.resize(static_cast<std::size_t>(std::max(0, mostDriftedCount)));
  std::map<OpKind, KindComparison> kinds;
  for (const OpDrift& d : c.ops) {
    KindComparison& k = kinds[d.kind];
    k.kind = d.kind;
    ++k.count;
    k.plannedMs += d.plannedMs;
    k.measuredMs += d.measuredMs;
  }
  for (auto& [kind, k] : kinds) {
    k.plannedMs /= k.count;
    k.measuredMs /= k.count;
    c.byKind.push_back(k);
  }
}

// No op ranges: GPU activity (NCCL kernels enter later as their transfer parts), windows from
// the device's ProfilerStep ranges (GPU annotation lanes), else from the host's ProfilerStep#N
// ranges (plain PyTorch profiler traces keep them on the CPU thread: step N is the earliest
// start to the latest end of the ranks' ranges named so), else its span.
Status gpuActivityWindows(HistoryStore& store, RunId run, DeviceIntervals& busy, DeviceWindows& windows,
                          int& iterations) {
  sqlite3* db = store.connection();
  Statement st(
      db,
      "SELECT e.device, e.start_ns, e.dur_ns, e.category, n.name FROM events e JOIN names n ON n.id = e.name_id "
      "WHERE e." RUN_EVENT_RANGE
      " AND ((e.device >= 0 AND e.category IN (?2, ?3, ?4, ?5)) OR n.name LIKE 'ProfilerStep#%')",
      nullptr);
  if (!st) return Error{store.path() + ": " + detail::lastError(db)};
  st.bind(1, run);
  st.bind(2, static_cast<int>(EventCategory::Kernel));
  st.bind(3, static_cast<int>(EventCategory::Memcpy));
  st.bind(4, static_cast<int>(EventCategory::Memset));
  st.bind(5, static_cast<int>(EventCategory::Nccl));
  std::map<int, Window> span;
  std::map<std::string, Window> hostSteps;  // ProfilerStep#N → window
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) {
    const int d = st.i32(0);
    const std::int64_t lo = st.i64(1), hi = lo + std::max<std::int64_t>(0, st.i64(2));
    const int category = st.i32(3);
    if (!isGpuActivity(category) || d < 0) {
      if (d >= 0) {
        windows[d].push_back({lo, hi});
      } else {
        auto [it, inserted] = hostSteps.try_emplace(st.text(4), lo, hi);
        if (!inserted) it->second = {std::min(it->second.first, lo), std::max(it->second.second, hi)};
      }
      continue;
    }
    auto [it, inserted] = span.try_emplace(d, lo, hi);
    if (!inserted) it->second = {std::min(it->second.first, lo), std::max(it->second.second, hi)};
    if (category != static_cast<int>(EventCategory::Nccl)) busy[d].push_back({lo, hi});
  }
  if (rc != SQLITE_DONE) return Error{store.path() + ": " + detail::lastError(db)};
  std::vector<Window> steps;
  steps.reserve(hostSteps.size());
  for (const auto& [name, w] : hostSteps) steps.push_back(w);
  std::sort(steps.begin(), steps.end());
  for (const auto& [d, w] : span) {
    if (!windows.count(d)) {
      if (steps.empty()) {
        windows[d].push_back(w);
      } else {
        windows[d] = steps;
      }
    }
    busy[d];
  }
  iterations = 0;
  for (const auto& [d, ws] : windows) iterations = std::max(iterations, static_cast<int>(ws.size()));
  return {};
}

// One device's busy, bubble and NCCL wait/transfer time over its iteration windows, as means.
// `busy` is merged; `wait` (merged) and `transfer` (sorted) are null when it has none.
void measureDevice(DeviceBubble& row, const std::vector<Interval>& busy, const std::vector<Interval>* wait,
                   const std::vector<Interval>* transfer, const std::vector<Window>& ws) {
  for (const auto& [lo, hi] : ws) {
    const std::int64_t inside = covered(busy, lo, hi);
    row.measuredBusyMs += static_cast<double>(inside) / kNsPerMs;
    row.measuredBubbleMs += static_cast<double>(hi - lo - inside) / kNsPerMs;
    if (wait) {
      std::int64_t idleWait = 0;
      for (const Interval& i : *wait) {
        const std::int64_t a = std::max(lo, i.start), z = std::min(hi, i.end);
        if (a < z) idleWait += (z - a) - covered(busy, a, z);
      }
      row.measuredCommWaitMs += static_cast<double>(idleWait) / kNsPerMs;
    }
    if (transfer) row.measuredCommTransferMs += static_cast<double>(coveredSum(*transfer, lo, hi)) / kNsPerMs;
  }
  const double n = static_cast<double>(std::max<std::size_t>(1, ws.size()));
  row.measuredBusyMs /= n;
  row.measuredBubbleMs /= n;
  row.measuredCommWaitMs /= n;
  row.measuredCommTransferMs /= n;
}

// Measured busy and bubble time per device (rows added to `devices`); without op ranges the
// iterations are counted from the windows found.
Status measureBubbles(HistoryStore& store, RunId run, const std::vector<MeasuredEvent>& events, const MeasuredOps& m,
                      std::map<int, DeviceBubble>& devices, int& iterations) {
  PS_ASSIGN_OR_RETURN(auto nccl, ncclParts(store, run));
  for (auto* parts : {&nccl.transfer, &nccl.wait}) {
    for (auto& [d, v] : *parts) {
      std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
    }
  }
  // Busy intervals per device: op ranges, or GPU activity when the run has none; plus the
  // transfer part of NCCL kernels (their wait part is the bubble's).
  DeviceIntervals busy;
  DeviceWindows windows;
  if (!events.empty()) {
    for (const auto& [key, w] : m.windows) windows[key.first].push_back(w);
    for (const auto& e : events) busy[e.device].push_back({e.startNs, e.startNs + e.durationNs});
  } else if (auto st = gpuActivityWindows(store, run, busy, windows, iterations); !st) {
    return st;
  }
  for (auto& [d, v] : busy) {
    // Without op ranges the GPU's own activity is the busy time, NCCL kernels only for their
    // transfer part. With op ranges, busy is compute as in the plan (where exposed transfers
    // are bubble too).
    if (const auto t = nccl.transfer.find(d); events.empty() && t != nccl.transfer.end()) {
      v.insert(v.end(), t->second.begin(), t->second.end());
    }
    unionInPlace(v);
  }
  // A kernel waiting for its peer while the device computes on another stream costs nothing:
  // only the wait in the device's idle time is bubble.
  DeviceIntervals waits;
  for (const auto& [d, v] : nccl.wait) {
    auto& merged = waits[d] = v;
    unionInPlace(merged);
  }
  for (const auto& [d, ws] : windows) {
    auto& row = devices[d];
    const auto& b = busy[d];
    const auto w = waits.find(d);
    const auto t = nccl.transfer.find(d);
    measureDevice(row, b, w != waits.end() ? &w->second : nullptr, t != nccl.transfer.end() ? &t->second : nullptr, ws);
  }
  return {};
}

}  // namespace

Expected<PlanComparison> compareRunToPlan(HistoryStore& store, RunId run, std::optional<PlanId> planId,
                                          int mostDriftedCount) {
  PS_ASSIGN_OR_RETURN(auto summary, store.runSummary(run));
  if (!planId) planId = summary.planId;
  if (!planId) {
    return Error{store.path() + ": run " + std::to_string(run) + " is not linked to a plan (nothing to compare with)"};
  }
  PS_ASSIGN_OR_RETURN(auto plan, store.loadPlan(*planId));
  PS_ASSIGN_OR_RETURN(auto events, store.loadEvents(run, EventCategory::Op));

  PlanComparison c;
  c.run = std::move(summary);
  c.planId = *planId;
  MeasuredOps measured = measureOps(events);
  c.iterations = measured.iterations;
  matchOps(plan, measured, c);
  rankDrifts(c, mostDriftedCount);

  const Metrics planned = computeMetrics(plan);
  std::map<int, DeviceBubble> devices;
  for (std::size_t d = 0; d < planned.devices.size(); ++d) {
    auto& row = devices[static_cast<int>(d)];
    row.plannedBusyMs = planned.devices[d].busyMs;
    row.plannedBubbleMs = planned.devices[d].spanMs - planned.devices[d].busyMs;
  }
  PS_RETURN_IF_ERROR(measureBubbles(store, run, events, measured, devices, c.iterations));
  for (auto& [d, row] : devices) {
    row.device = d;
    c.devices.push_back(row);
  }
  return c;
}

namespace {
Json driftJson(const OpDrift& d) {
  return Json{{"device", d.device},
              {"virtual_stage", d.virtualStage},
              {"kind", std::string(opKindName(d.kind))},
              {"microbatch", d.microbatch},
              {"planned_start_ms", d.plannedStartMs},
              {"planned_ms", d.plannedMs},
              {"measured_start_ms", d.measuredStartMs},
              {"measured_ms", d.measuredMs},
              {"start_drift_ms", d.startDriftMs},
              {"duration_delta_ms", d.durationDeltaMs},
              {"iterations", d.iterations}};
}
}  // namespace

Json planComparisonToJson(const PlanComparison& c) {
  Json ops = Json::array();
  for (const auto& d : c.ops) ops.push_back(driftJson(d));
  Json top = Json::array();
  for (const auto& d : c.mostDrifted) top.push_back(driftJson(d));
  Json devices = Json::array();
  for (const auto& d : c.devices) {
    devices.push_back({{"device", d.device},
                       {"planned_busy_ms", d.plannedBusyMs},
                       {"planned_bubble_ms", d.plannedBubbleMs},
                       {"measured_busy_ms", d.measuredBusyMs},
                       {"measured_bubble_ms", d.measuredBubbleMs},
                       {"measured_comm_wait_ms", d.measuredCommWaitMs},
                       {"measured_comm_transfer_ms", d.measuredCommTransferMs}});
  }
  Json latest = Json::array();
  for (const auto& d : c.latest) latest.push_back(driftJson(d));
  Json kinds = Json::array();
  for (const auto& k : c.byKind) {
    kinds.push_back({{"kind", std::string(opKindName(k.kind))},
                     {"count", k.count},
                     {"planned_ms", k.plannedMs},
                     {"measured_ms", k.measuredMs}});
  }
  return Json{{"run", runSummaryToJson(c.run)},
              {"plan", c.planId},
              {"iterations", c.iterations},
              {"ops", ops},
              {"most_drifted", top},
              {"by_device", devices},
              {"unmatched_planned", c.unmatchedPlanned},
              {"unmatched_measured", c.unmatchedMeasured},
              {"latest", latest},
              {"by_kind", kinds}};
}

std::string planComparisonTable(const PlanComparison& c) {
  std::ostringstream o;
  o << "run " << c.run.id << " '" << excerpt(c.run.name, 200) << "' vs plan " << c.planId << " (" << c.iterations
    << " iteration(s), " << c.ops.size() << " ops matched, " << c.unmatchedPlanned << " planned ops unmeasured, "
    << c.unmatchedMeasured << " measured ranges unplanned)\n\n";
  o << pad("device", 6) << pad("planned busy", 14) << pad("planned bubble", 16) << pad("measured busy", 15)
    << pad("measured bubble", 17) << pad("of it comm wait", 17) << "  (ms per iteration)\n";
  for (const auto& d : c.devices) {
    o << pad(std::to_string(d.device), 6) << pad(fixed(d.plannedBusyMs), 14) << pad(fixed(d.plannedBubbleMs), 16)
      << pad(fixed(d.measuredBusyMs), 15) << pad(fixed(d.measuredBubbleMs), 17) << pad(fixed(d.measuredCommWaitMs), 17)
      << '\n';
  }
  if (!c.byKind.empty()) {
    o << "\nper op kind (mean ms)\n"
      << pad("kind", 5) << pad("ops", 7) << pad("planned", 10) << pad("measured", 10) << '\n';
    for (const auto& k : c.byKind) {
      o << pad(std::string(opKindName(k.kind)), 5) << pad(std::to_string(k.count), 7) << pad(fixed(k.plannedMs), 10)
        << pad(fixed(k.measuredMs), 10) << '\n';
    }
  }
  o << "\nstarted latest relative to plan\n"
    << pad("device", 6) << pad("stage", 6) << pad("kind", 5) << pad("mb", 5) << pad("plan start", 12)
    << pad("meas start", 12) << pad("late by", 10) << '\n';
  for (const auto& d : c.latest) {
    o << pad(std::to_string(d.device), 6) << pad(std::to_string(d.virtualStage), 6)
      << pad(std::string(opKindName(d.kind)), 5) << pad(std::to_string(d.microbatch), 5)
      << pad(fixed(d.plannedStartMs), 12) << pad(fixed(d.measuredStartMs), 12) << pad(fixed(d.startDriftMs), 10)
      << '\n';
  }
  o << "\nmost drifted ops\n"
    << pad("device", 6) << pad("stage", 6) << pad("kind", 5) << pad("mb", 5) << pad("plan start", 12)
    << pad("meas start", 12) << pad("plan ms", 10) << pad("meas ms", 10) << '\n';
  for (const auto& d : c.mostDrifted) {
    o << pad(std::to_string(d.device), 6) << pad(std::to_string(d.virtualStage), 6)
      << pad(std::string(opKindName(d.kind)), 5) << pad(std::to_string(d.microbatch), 5)
      << pad(fixed(d.plannedStartMs), 12) << pad(fixed(d.measuredStartMs), 12) << pad(fixed(d.plannedMs), 10)
      << pad(fixed(d.measuredMs), 10) << '\n';
  }
  return o.str();
}

// ---- producers -----------------------------------------------------------------------------

OpProducers::OpProducers(const Plan* plan, int maxStage) {
  if (plan == nullptr || plan->virtualStages.empty()) {
    for (int s = 0; s <= maxStage; ++s) {
      m_previous.push_back(s - 1);
      m_next.push_back(s + 1 <= maxStage ? s + 1 : -1);
    }
    m_fallback = true;
    return;
  }
  StageNeighbours n = stageNeighbours(*plan);
  m_previous = std::move(n.previous);
  m_next = std::move(n.next);
  const auto lanes = planLanes(*plan);
  for (const OpDependency& dep : derivedDependencies(*plan, lanes)) {
    const OrderedOp& from = lanes[static_cast<std::size_t>(dep.from.device)][static_cast<std::size_t>(dep.from.index)];
    const OrderedOp& to = lanes[static_cast<std::size_t>(dep.to.device)][static_cast<std::size_t>(dep.to.index)];
    auto& list = m_derived[{to.virtualStage, to.kind, to.microbatch}];
    const StageOp key{from.virtualStage, from.kind, from.microbatch};
    if (std::find(list.begin(), list.end(), key) == list.end()) list.push_back(key);
  }
}

std::vector<OpProducers::StageOp> OpProducers::of(int virtualStage, OpKind kind, int microbatch) const {
  std::vector<StageOp> out;
  const bool known = inRange(m_previous, virtualStage);
  const int previous = known ? m_previous[static_cast<std::size_t>(virtualStage)] : -1;
  const int next = known ? m_next[static_cast<std::size_t>(virtualStage)] : -1;
  auto add = [&](int stage, std::initializer_list<OpKind> kinds) {
    if (stage < 0) return;
    for (OpKind k : kinds) out.push_back({stage, k, microbatch});
  };
  if (m_fallback) {
    // A trace names no component: any forward-direction pass of the stage before, any
    // backward-direction pass of the stage after.
    if (kind == OpKind::F || kind == OpKind::N || kind == OpKind::S) add(previous, {OpKind::F, OpKind::N, OpKind::S});
    if (kind == OpKind::B || kind == OpKind::BW || kind == OpKind::T) add(next, {OpKind::B, OpKind::BW, OpKind::T});
    return out;
  }
  if (kind == OpKind::F) add(previous, {OpKind::F});
  if (kind == OpKind::N) add(previous, {OpKind::N});
  if (kind == OpKind::B || kind == OpKind::BW) add(next, {OpKind::B, OpKind::BW});
  if (auto it = m_derived.find({virtualStage, kind, microbatch}); it != m_derived.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  return out;
}

// ---- idle breakdown -----------------------------------------------------------------------

namespace {

// The measured ops of a run (highest virtual stage among them) and, per device, the merged
// intervals its NCCL kernels cover.
struct RunOps {
  std::vector<const MeasuredEvent*> ops;
  std::map<int, std::vector<Interval>> comm;
  int maxStage = 0;
};

RunOps runOps(const std::vector<MeasuredEvent>& events) {
  RunOps m;
  for (const auto& e : events) {
    if (e.category == EventCategory::Op && e.device >= 0) {
      m.ops.push_back(&e);
      m.maxStage = std::max(m.maxStage, e.virtualStage);
    } else if (e.category == EventCategory::Nccl && e.device >= 0) {
      m.comm[e.device].push_back({e.startNs, e.startNs + e.durationNs});
    }
  }
  for (auto& [d, v] : m.comm) unionInPlace(v);
  return m;
}

// Planned idle before each op (its start − the previous op's end on its device), by
// (device, stage, kind, microbatch).
using PlannedIdle = std::map<std::tuple<int, int, int, int>, double>;

PlannedIdle plannedIdle(const Plan& plan) {
  PlannedIdle idle;
  std::map<int, double> lastEnd;
  for (const Op& op : plan.ops) {
    auto it = lastEnd.find(op.device);
    if (it != lastEnd.end()) {
      idle[{op.device, op.virtualStage, static_cast<int>(op.kind), op.microbatch}] =
          std::max(0.0, op.startMs - it->second);
    }
    lastEnd[op.device] = std::max(it == lastEnd.end() ? op.endMs : it->second, op.endMs);
  }
  return idle;
}

// The measured ops by (iteration, stage, kind, microbatch), each iteration's window, and the
// producers of each op, to tell when an op's inputs were ready.
class MeasuredIndex {
 public:
  MeasuredIndex(const std::vector<const MeasuredEvent*>& ops, const OpProducers& producers) : m_producers(producers) {
    for (const auto* e : ops) {
      m_byKey.emplace(OpKey{e->iteration, e->virtualStage, e->kind, e->microbatch}, e);
      auto [it, inserted] = m_window.try_emplace(e->iteration, e->startNs, e->startNs + e->durationNs);
      if (!inserted) {
        it->second.first = std::min(it->second.first, e->startNs);
        it->second.second = std::max(it->second.second, e->startNs + e->durationNs);
      }
    }
  }

  /// The iteration's [first start, last end] over all devices.
  std::pair<std::int64_t, std::int64_t> window(int iteration) { return m_window[iteration]; }

  /// When the op's inputs from other devices were ready: the latest end of its producers
  /// there (partial-batch N ops share a key: the latest of them).
  std::optional<std::int64_t> producerEnd(const MeasuredEvent& e) const {
    const auto kind = static_cast<OpKind>(std::clamp(e.kind, 0, kOpKindCount - 1));
    std::optional<std::int64_t> ready;
    for (const OpProducers::StageOp& producer : m_producers.of(e.virtualStage, kind, e.microbatch)) {
      const OpKey key{e.iteration, producer.virtualStage, static_cast<int>(producer.kind), producer.microbatch};
      for (auto it = m_byKey.lower_bound(key); it != m_byKey.end() && !(key < it->first); ++it) {
        const MeasuredEvent& p = *it->second;
        if (p.device != e.device) ready = std::max(ready.value_or(p.startNs + p.durationNs), p.startNs + p.durationNs);
      }
    }
    return ready;
  }

 private:
  const OpProducers& m_producers;
  std::multimap<OpKey, const MeasuredEvent*> m_byKey;
  std::map<int, std::pair<std::int64_t, std::int64_t>> m_window;  // iteration → [first start, last end]
};

// Adds one device's iteration to its row: its ops (in start order) busy, the gaps between them
// split into bubble (as planned), dependency wait, communication and host wait, and the fill and
// drain at the window's edges into communication and bubble.
void addLaneIdle(IdleBreakdown& row, const std::vector<const MeasuredEvent*>& lane,
                 std::pair<std::int64_t, std::int64_t> window, const std::vector<Interval>& c,
                 const MeasuredIndex& index, const PlannedIdle& plannedIdleMs) {
  const auto [winStart, winEnd] = window;
  row.windowMs += static_cast<double>(winEnd - winStart) / kNsPerMs;
  // Fill and drain: before the first and after the last op of the device in the window.
  auto edgeGap = [&](std::int64_t a, std::int64_t b) {
    if (b <= a) return;
    const std::int64_t cm = covered(c, a, b);
    row.communicationMs += static_cast<double>(cm) / kNsPerMs;
    row.bubbleMs += static_cast<double>(b - a - cm) / kNsPerMs;
  };
  std::int64_t cursor = winStart;
  for (std::size_t i = 0; i < lane.size(); ++i) {
    const MeasuredEvent& e = *lane[i];
    const std::int64_t end = e.startNs + e.durationNs;
    if (e.startNs > cursor) {
      if (i == 0) {
        edgeGap(cursor, e.startNs);
      } else {
        const std::int64_t a = cursor, b = e.startNs;
        const std::int64_t ready = std::clamp(index.producerEnd(e).value_or(a), a, b);
        const std::int64_t commWait = covered(c, a, ready);
        const std::int64_t commHost = covered(c, ready, b);
        const double waitMs = static_cast<double>(ready - a - commWait) / kNsPerMs;
        double plannedMs = 0;
        if (auto p = plannedIdleMs.find({e.device, e.virtualStage, e.kind, e.microbatch}); p != plannedIdleMs.end()) {
          plannedMs = p->second;
        }
        const double bubble = std::min(waitMs, plannedMs);
        row.bubbleMs += bubble;
        row.dependencyWaitMs += waitMs - bubble;
        row.communicationMs += static_cast<double>(commWait + commHost) / kNsPerMs;
        row.hostWaitMs += static_cast<double>(b - ready - commHost) / kNsPerMs;
      }
    }
    if (end > cursor) {
      row.busyMs += static_cast<double>(end - std::max(cursor, e.startNs)) / kNsPerMs;
      cursor = end;
    }
  }
  edgeGap(cursor, winEnd);
}

}  // namespace

Expected<std::vector<IdleBreakdown>> idleBreakdown(HistoryStore& store, RunId run) {
  PS_ASSIGN_OR_RETURN(auto summary, store.runSummary(run));
  std::optional<Plan> plan;
  if (summary.planId) {
    if (auto p = store.loadPlan(*summary.planId)) plan = std::move(*p);
  }
  PS_ASSIGN_OR_RETURN(auto events, store.loadEvents(run));

  const RunOps measured = runOps(events);
  // OpProducers keeps a table per stage: sized from a bounded number only (imports bound
  // stages; a database of an older build may not have).
  if (measured.maxStage >= kMaxPlanVirtualStages) {
    return Error{store.path() + ": run " + std::to_string(run) + ": an op range names virtual stage " +
                 std::to_string(measured.maxStage) + ", more than a plan can have (" +
                 std::to_string(kMaxPlanVirtualStages) + ")"};
  }
  const OpProducers producers(plan ? &*plan : nullptr, measured.maxStage);
  MeasuredIndex index(measured.ops, producers);
  const PlannedIdle plannedIdleMs = plan ? plannedIdle(*plan) : PlannedIdle{};

  // Ops per (device, iteration) in start order.
  std::map<std::pair<int, int>, std::vector<const MeasuredEvent*>> lanes;
  for (const auto* e : measured.ops) lanes[{e->device, e->iteration}].push_back(e);
  std::map<int, IdleBreakdown> rows;
  for (auto& [key, lane] : lanes) {
    std::sort(lane.begin(), lane.end(), [](const auto* x, const auto* y) { return x->startNs < y->startNs; });
    const auto [device, iteration] = key;
    IdleBreakdown& row = rows[device];
    row.device = device;
    static const std::vector<Interval> kNoComm;
    const auto commIt = measured.comm.find(device);
    const std::vector<Interval>& c = commIt == measured.comm.end() ? kNoComm : commIt->second;
    addLaneIdle(row, lane, index.window(iteration), c, index, plannedIdleMs);
  }
  std::vector<IdleBreakdown> out;
  for (auto& [d, row] : rows) {
    row.idleMs = row.communicationMs + row.dependencyWaitMs + row.hostWaitMs + row.bubbleMs;
    out.push_back(row);
  }
  return out;
}

Json idleBreakdownToJson(const std::vector<IdleBreakdown>& rows) {
  Json out = Json::array();
  for (const auto& r : rows) {
    out.push_back({{"device", r.device},
                   {"window_ms", r.windowMs},
                   {"busy_ms", r.busyMs},
                   {"idle_ms", r.idleMs},
                   {"communication_ms", r.communicationMs},
                   {"dependency_wait_ms", r.dependencyWaitMs},
                   {"host_wait_ms", r.hostWaitMs},
                   {"bubble_ms", r.bubbleMs}});
  }
  return out;
}

}  // namespace pipestudio::history
