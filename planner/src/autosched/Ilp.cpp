// Exact mode of zb-auto: a disjunctive mixed-integer program in the spirit of the ILP of
// Qi et al. 2023 (§3 and Appendix, "ILP formulation"): continuous start times, one binary per
// pair of ops on one device whose order the dependencies do not already fix, memory checked at
// every F start as a linear function of those binaries, makespan minimised. Solved with CBC
// (C interface, coin/Cbc_C_Interface.h) from the heuristic's order as MIP start, under a time
// limit; CBC's best bound gives the remaining gap when it stops early.
//
// Restriction (stated in AutoSchedule.hpp): each stage runs its F, B and W passes in
// microbatch order. Transfers are modelled as delays without link contention, so the ILP's
// objective is a lower bound of its order's makespan when transfers overlap; the order is
// re-timed by the caller.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "autosched/Instance.hpp"
#include "pipestudio/common/Index.hpp"

#ifdef PIPESTUDIO_HAVE_CBC
#include <coin/Cbc_C_Interface.h>
#endif

namespace pipestudio::autosched {

#ifndef PIPESTUDIO_HAVE_CBC

ExactResult solveExact(const Instance&, const Orders&, double, double) {
  ExactResult r;
  r.message = "exact mode needs CBC (coinor-libcbc-dev); this build has none";
  return r;
}

#else

namespace {

// Dependency edges of the op DAG (in-order chains per stage and kind included): (from, to, lag).
struct Edge {
  int from;
  int to;
  double lagMs;  // to.start ≥ from.start + lagMs
};

std::vector<Edge> edgesOf(const Instance& inst) {
  std::vector<Edge> edges;
  const int m = inst.microbatches;
  for (int s = 0; s < inst.stages; ++s) {
    for (int k = 0; k < 3; ++k) {
      for (int i = 0; i + 1 < m; ++i)
        edges.push_back({inst.opId(s, k, i), inst.opId(s, k, i + 1), inst.durationOf(k, s)});
    }
    for (int i = 0; i < m; ++i) {
      if (s + 1 < inst.stages) {
        edges.push_back({inst.opId(s, kF, i), inst.opId(s + 1, kF, i), inst.durationOf(kF, s) + inst.sendMsOf(s)});
        edges.push_back({inst.opId(s + 1, kB, i), inst.opId(s, kB, i), inst.durationOf(kB, s + 1) + inst.sendMsOf(s)});
      } else {
        edges.push_back({inst.opId(s, kF, i), inst.opId(s, kB, i), inst.durationOf(kF, s)});
      }
      edges.push_back({inst.opId(s, kB, i), inst.opId(s, kW, i), inst.durationOf(kB, s)});
    }
  }
  return edges;
}

// Each device's ops by the solver's start times, never against a dependency: a topological
// order (Kahn) of the device's ops under `reach`, taking the earliest start (then the lowest
// op id) among the ready ones. A comparator with a tolerance on the starts would not be a
// strict weak order, which std::sort may answer by reading past the range; a start that is
// not finite sorts last.
Orders ordersFromStarts(const std::vector<double>& starts, const IdVector<std::vector<int> >& opsOf,
                        const Grid<char>& reach) {
  Orders orders;
  for (const std::vector<int>& ops : opsOf) {  // per device
    std::vector<int> left = ops;
    std::vector<int> order;
    order.reserve(ops.size());
    while (!left.empty()) {
      std::size_t pick = left.size();
      for (std::size_t i = 0; i < left.size(); ++i) {
        const int a = left[i];
        const bool ready = std::none_of(left.begin(), left.end(), [&](int b) { return b != a && reach(b, a); });
        if (!ready) continue;
        const double sa = std::isfinite(starts[static_cast<std::size_t>(a)]) ? starts[static_cast<std::size_t>(a)]
                                                                             : std::numeric_limits<double>::max();
        if (pick == left.size()) {
          pick = i;
          continue;
        }
        const int p = left[pick];
        const double sp = std::isfinite(starts[static_cast<std::size_t>(p)]) ? starts[static_cast<std::size_t>(p)]
                                                                             : std::numeric_limits<double>::max();
        if (sa < sp || (sa == sp && a < p)) pick = i;
      }
      if (pick == left.size()) pick = 0;  // a cycle cannot happen (reach is a DAG's closure)
      order.push_back(left[pick]);
      left.erase(left.begin() + static_cast<std::ptrdiff_t>(pick));
    }
    orders.push_back(std::move(order));
  }
  return orders;
}

}  // namespace

ExactResult solveExact(const Instance& inst, const Orders& start, double startMakespanMs, double timeLimitS) {
  ExactResult result;
  result.available = true;
  const auto t0 = std::chrono::steady_clock::now();
  const int n = inst.opCount();
  const std::vector<Edge> edges = edgesOf(inst);

  // reach(a, b): b depends (transitively) on a. Fixpoint over the DAG (n ≤ 192).
  Grid<char> reach(n, n, 0);
  for (const Edge& e : edges) reach(e.from, e.to) = 1;
  for (int k = 0; k < n; ++k) {
    for (int a = 0; a < n; ++a) {
      if (!reach(a, k)) continue;
      for (int b = 0; b < n; ++b) {
        if (reach(k, b)) reach(a, b) = 1;
      }
    }
  }

  // Heuristic start times (a feasible point: contention only delays).
  const Timing timing = timeOrders(inst, start);
  const double upper = startMakespanMs;

  Cbc_Model* model = Cbc_newModel();
  Cbc_setLogLevel(model, 0);
  Cbc_setObjSense(model, 1.0);
  // Columns: x_op (start times), C (makespan), then y_pair.
  std::vector<double> mipValues;
  for (int op = 0; op < n; ++op) {
    Cbc_addCol(model, ("x" + std::to_string(op)).c_str(), 0.0, std::max(0.0, upper - inst.duration(op)), 0.0, 0, 0,
               nullptr, nullptr);
    mipValues.push_back(timing.ok ? timing.start[static_cast<std::size_t>(op)] : 0.0);
  }
  const int cCol = n;
  Cbc_addCol(model, "C", 0.0, upper, 1.0, 0, 0, nullptr, nullptr);
  mipValues.push_back(upper);

  struct Pair {
    int a;
    int b;
    int col;
  };
  std::vector<Pair> pairs;
  Grid<int> pairCol(n, n, -1);   // col of y(a before b) for a < b
  IdVector<int> position(n, 0);  // per op: where in its order
  for (const auto& order : start) {
    for (std::size_t i = 0; i < order.size(); ++i) position[order[i]] = static_cast<int>(i);
  }
  IdVector<std::vector<int> > opsOf(inst.devices);
  for (int op = 0; op < n; ++op) opsOf[inst.deviceOf(op)].push_back(op);
  int col = n + 1;
  for (const auto& ops : opsOf) {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      for (std::size_t j = i + 1; j < ops.size(); ++j) {
        const int a = ops[i];
        const int b = ops[j];
        if (reach(a, b) || reach(b, a)) continue;
        Cbc_addCol(model, ("y" + std::to_string(a) + "_" + std::to_string(b)).c_str(), 0.0, 1.0, 0.0, 1, 0, nullptr,
                   nullptr);
        pairs.push_back({a, b, col});
        pairCol(a, b) = col;
        mipValues.push_back(position[a] < position[b] ? 1.0 : 0.0);
        ++col;
      }
    }
  }

  // Rows.
  for (const Edge& e : edges) {
    const std::array<int, 2> cols = {e.to, e.from};
    const std::array<double, 2> coefs = {1.0, -1.0};
    Cbc_addRow(model, "", 2, cols.data(), coefs.data(), 'G', e.lagMs);
  }
  const double bigM = upper;
  for (const Pair& pr : pairs) {
    // y = 1: a before b → x_b − x_a − M·y ≥ d_a − M ; y = 0: b before a → x_a − x_b + M·y ≥ d_b.
    const std::array<int, 3> cols = {pr.b, pr.a, pr.col};
    const std::array<double, 3> c1 = {1.0, -1.0, -bigM};
    Cbc_addRow(model, "", 3, cols.data(), c1.data(), 'G', inst.duration(pr.a) - bigM);
    const std::array<double, 3> c2 = {-1.0, 1.0, bigM};
    Cbc_addRow(model, "", 3, cols.data(), c2.data(), 'G', inst.duration(pr.b));
  }
  for (int s = 0; s < inst.stages; ++s) {
    const int last = inst.opId(s, kW, inst.microbatches - 1);
    const std::array<int, 2> cols = {cCol, last};
    const std::array<double, 2> coefs = {1.0, -1.0};
    Cbc_addRow(model, "", 2, cols.data(), coefs.data(), 'G', inst.duration(last));
  }
  // Memory at every F start on a device with a finite budget.
  for (int d = 0; d < inst.devices; ++d) {
    const std::int64_t budget = inst.budgetBytesOf(d);
    if (budget >= kUnlimited) continue;
    const auto& ops = opsOf[d];
    for (int j : ops) {
      if (inst.kindOf(j) != kF) continue;
      auto rhs = static_cast<double>(budget - inst.activationBytesOf(inst.stageOf(j)));
      std::vector<int> cols;
      std::vector<double> coefs;
      for (int a : ops) {
        if (a == j) continue;
        const int s = inst.stageOf(a);
        double delta = 0;  // memory change once a has happened before j starts
        switch (inst.kindOf(a)) {
          case kF:
            delta = static_cast<double>(inst.activationBytesOf(s));
            break;
          case kB:
            delta = -static_cast<double>(inst.activationBytesOf(s) - inst.weightGradBytesOf(s));
            break;
          default:
            delta = -static_cast<double>(inst.weightGradBytesOf(s));
            break;
        }
        if (delta == 0) continue;
        if (reach(a, j)) {
          rhs -= delta;
        } else if (reach(j, a)) {
          continue;
        } else if (pairCol(a, j) >= 0) {  // y(a before j)
          cols.push_back(pairCol(a, j));
          coefs.push_back(delta);
        } else {  // y(j before a): a before j = 1 − y
          rhs -= delta;
          cols.push_back(pairCol(j, a));
          coefs.push_back(-delta);
        }
      }
      if (cols.empty()) continue;
      Cbc_addRow(model, "", static_cast<int>(cols.size()), cols.data(), coefs.data(), 'L', rhs);
    }
  }

  std::vector<int> mipCols(mipValues.size());
  for (std::size_t i = 0; i < mipCols.size(); ++i) mipCols[i] = static_cast<int>(i);
  if (timing.ok) Cbc_setMIPStartI(model, static_cast<int>(mipCols.size()), mipCols.data(), mipValues.data());
  Cbc_setMaximumSeconds(model, std::max(0.1, timeLimitS));
  // No CGL preprocessing: when the time limit expires during it, CBC 2.10's
  // CglPreProcess::postProcess dereferences a solver it has already released (SIGSEGV with
  // --exact-time-limit 0.001), and a post-processed solution cut short can violate rows
  // (coin-or/Cbc#353). Without it the incumbent is the model's own point.
  Cbc_setParameter(model, "preprocess", "off");
  Cbc_setAllowableFractionGap(model, 1e-6);
  Cbc_solve(model);

  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double* solution = Cbc_bestSolution(model);
  result.optimal = Cbc_isProvenOptimal(model) != 0;
  result.timeLimit = Cbc_isSecondsLimitReached(model) != 0;
  if (solution != nullptr) {
    result.solved = true;
    result.objectiveMs = Cbc_getObjValue(model);
    result.boundMs =
        result.optimal ? result.objectiveMs : std::min(result.objectiveMs, Cbc_getBestPossibleObjValue(model));
    result.orders = ordersFromStarts(std::vector<double>(solution, solution + n), opsOf, reach);
    result.message = result.optimal ? "proven optimal" : "stopped at the time limit";
  } else {
    result.message = Cbc_isProvenInfeasible(model) ? "CBC proved the model infeasible" : "CBC found no solution";
  }
  Cbc_deleteModel(model);
  return result;
}

#endif

}  // namespace pipestudio::autosched
