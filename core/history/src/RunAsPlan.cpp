// Plans in the history (stored as plan documents, linked to runs) and a recorded run read
// back as a plan, so the timeline and the comparisons treat runs and plans alike.
#include <algorithm>
#include <map>

#include "Impl.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/JsonReader.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/PlanIO.hpp"

namespace pipestudio::history {

using detail::exec;
using detail::Statement;

// ---- plans ------------------------------------------------------------------------------

Expected<PlanId> HistoryStore::addPlan(const Plan& plan, std::string_view name) {
  Impl& im = *m_impl;
  PS_RETURN_IF_ERROR(im.begin());
  const std::string document = planToJson(plan).dump();
  Statement ins(im.db,
                "INSERT INTO plans(created_ms, name, schedule, devices, microbatches, makespan_ms, bubble_ratio, "
                "document) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                nullptr);
  ins.bind(1, nowUnixMs());
  ins.bind(2, name.empty() ? std::string_view(plan.config.schedule) : name);
  ins.bind(3, plan.config.schedule);
  ins.bind(4, plan.config.devices);
  ins.bind(5, plan.config.microbatches);
  ins.bind(6, plan.metrics.makespanMs);
  ins.bind(7, plan.metrics.bubbleRatio);
  ins.bindStatic(8, document);
  if (ins.step() != SQLITE_DONE)
    return Error{withPath(im.path, "storing the plan failed: " + detail::lastError(im.db))};
  const PlanId id = sqlite3_last_insert_rowid(im.db);
  Statement op(im.db,
               "INSERT INTO planned_ops(plan_id, seq, device, virtual_stage, kind, microbatch, start_ms, end_ms, "
               "samples) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
               nullptr);
  std::int64_t seq = 0;
  for (const Op& o : plan.ops) {
    op.bind(1, id);
    op.bind(2, seq++);
    op.bind(3, o.device);
    op.bind(4, o.virtualStage);
    op.bind(5, static_cast<int>(o.kind));
    op.bind(6, o.microbatch);
    op.bind(7, o.startMs);
    op.bind(8, o.endMs);
    op.bind(9, o.samples);
    if (op.step() != SQLITE_DONE) return Error{withPath(im.path, detail::lastError(im.db))};
    op.reset();
  }
  PS_RETURN_IF_ERROR(im.commit());
  return id;
}

Expected<Plan> HistoryStore::loadPlan(PlanId id) {
  Statement st(m_impl->db, "SELECT document FROM plans WHERE id = ?1", nullptr);
  if (!st) return Error{detail::lastError(m_impl->db)};
  st.bind(1, id);
  if (const int rc = st.step(); rc != SQLITE_ROW) {
    if (rc != SQLITE_DONE) return Error{withPath(m_impl->path, detail::lastError(m_impl->db))};
    return Error{withPath(m_impl->path, "no plan with id " + std::to_string(id))};
  }
  const std::string where = m_impl->path + ":plan " + std::to_string(id);
  PS_ASSIGN_OR_RETURN(auto doc, parseJson(st.text(0), where));
  JsonReader reader(doc);
  auto plan = readPlan(reader, reader.root());
  if (!reader.ok() || !plan) return reader.ok() ? Error{where + ": invalid plan"} : reader.toError();
  return std::move(*plan);
}

Status HistoryStore::linkRunToPlan(RunId run, PlanId plan) {
  PS_RETURN_IF_ERROR(flush());
  Statement st(m_impl->db, "UPDATE runs SET plan_id = ?2 WHERE id = ?1 AND EXISTS(SELECT 1 FROM plans WHERE id = ?2)",
               nullptr);
  st.bind(1, run);
  st.bind(2, plan);
  if (st.step() != SQLITE_DONE) return Error{withPath(m_impl->path, detail::lastError(m_impl->db))};
  if (sqlite3_changes(m_impl->db) != 1) {
    return Error{withPath(m_impl->path, "cannot link run " + std::to_string(run) + " to plan " + std::to_string(plan) +
                                            ": no such run or plan")};
  }
  return {};
}

Expected<Plan> HistoryStore::runAsPlan(RunId id, int iteration) {
  PS_ASSIGN_OR_RETURN(auto summary, runSummary(id));
  PS_ASSIGN_OR_RETURN(auto events, loadEvents(id, EventCategory::Op));
  Plan plan;
  if (summary.planId) {
    if (auto linked = loadPlan(*summary.planId)) {
      plan = std::move(*linked);
      plan.ops.clear();
      plan.comms.clear();
    }
  }
  if (plan.config.schedule.empty()) plan.config.schedule = "measured";
  std::int64_t originNs = INT64_MAX;
  int maxDevice = -1;
  int maxStage = -1;
  int maxMicrobatch = -1;
  for (const auto& e : events) {
    if (iteration >= 0 && e.iteration != iteration) continue;
    if (e.device >= kMaxPlanDevices) {
      return Error{withPath(m_impl->path, "run " + std::to_string(id) + ": an op range names device " +
                                              std::to_string(e.device) + ", more than a plan can have (" +
                                              std::to_string(kMaxPlanDevices) + ")")};
    }
    originNs = std::min(originNs, e.startNs);
    maxDevice = std::max(maxDevice, e.device);
    maxStage = std::max(maxStage, e.virtualStage);
    maxMicrobatch = std::max(maxMicrobatch, e.microbatch);
  }
  for (const auto& e : events) {
    if (iteration >= 0 && e.iteration != iteration) continue;
    if (e.device < 0 || e.kind < 0 || e.kind >= kOpKindCount) continue;
    Op op;
    op.device = e.device;
    op.virtualStage = std::max(0, e.virtualStage);
    op.kind = static_cast<OpKind>(e.kind);
    op.microbatch = std::max(0, e.microbatch);
    op.startMs = static_cast<double>(e.startNs - originNs) / 1e6;
    op.endMs = static_cast<double>(e.startNs + e.durationNs - originNs) / 1e6;
    plan.ops.push_back(op);
  }
  // loadEvents orders by (device, start): per device in execution order, as Plan requires.
  plan.config.devices = std::max(plan.config.devices, maxDevice + 1);
  if (!summary.planId) {
    plan.config.microbatches = std::max(1, maxMicrobatch + 1);
    // Without a linked plan, one virtual stage per measured stage index, placed where it first
    // ran. Sized from the run's ids only after estimating what they cost: imports bound them,
    // but a database of an older build (or edited by hand) may hold anything.
    if (auto st = checkStageTables(maxStage + 1, plan.config.microbatches); !st) {
      return Error{withPath(m_impl->path, "run " + std::to_string(id) + ": its op ranges name " + st.message())};
    }
    plan.virtualStages.assign(static_cast<std::size_t>(maxStage) + 1, VirtualStage{});
    std::vector<bool> placed(plan.virtualStages.size(), false);
    for (int s = 0; s <= maxStage; ++s) plan.virtualStages[static_cast<std::size_t>(s)].id = s;
    for (const Op& op : plan.ops) {
      const auto s = static_cast<std::size_t>(op.virtualStage);
      if (s < placed.size() && !placed[s]) {
        plan.virtualStages[s].device = op.device;
        placed[s] = true;
      }
    }
  }
  plan.metrics = computeMetrics(plan);
  return plan;
}

}  // namespace pipestudio::history
