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
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "autosched/Instance.hpp"

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
    const auto S = static_cast<std::size_t>(s);
    for (int k = 0; k < 3; ++k) {
      for (int i = 0; i + 1 < m; ++i)
        edges.push_back({inst.opId(s, k, i), inst.opId(s, k, i + 1), inst.durationMs[k][S]});
    }
    for (int i = 0; i < m; ++i) {
      if (s + 1 < inst.stages) {
        edges.push_back({inst.opId(s, kF, i), inst.opId(s + 1, kF, i), inst.durationMs[kF][S] + inst.sendMs[S]});
        edges.push_back({inst.opId(s + 1, kB, i), inst.opId(s, kB, i), inst.durationMs[kB][S + 1] + inst.sendMs[S]});
      } else {
        edges.push_back({inst.opId(s, kF, i), inst.opId(s, kB, i), inst.durationMs[kF][S]});
      }
      edges.push_back({inst.opId(s, kB, i), inst.opId(s, kW, i), inst.durationMs[kB][S]});
    }
  }
  return edges;
}

}  // namespace

ExactResult solveExact(const Instance& inst, const Orders& start, double startMakespanMs, double timeLimitS) {
  ExactResult result;
  result.available = true;
  const auto t0 = std::chrono::steady_clock::now();
  const int n = inst.opCount();
  const auto N = static_cast<std::size_t>(n);
  const std::vector<Edge> edges = edgesOf(inst);

  // reach[a][b]: b depends (transitively) on a. Fixpoint over the DAG (n ≤ 192).
  std::vector<std::vector<char> > reach(N, std::vector<char>(N, 0));
  for (const Edge& e : edges) reach[static_cast<std::size_t>(e.from)][static_cast<std::size_t>(e.to)] = 1;
  for (std::size_t k = 0; k < N; ++k) {
    for (std::size_t a = 0; a < N; ++a) {
      if (!reach[a][k]) continue;
      for (std::size_t b = 0; b < N; ++b) {
        if (reach[k][b]) reach[a][b] = 1;
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
  std::vector<std::vector<int> > pairCol(N, std::vector<int>(N, -1));  // col of y(a before b) for a < b
  std::vector<int> position(N, 0);
  for (const auto& order : start) {
    for (std::size_t i = 0; i < order.size(); ++i) position[static_cast<std::size_t>(order[i])] = static_cast<int>(i);
  }
  std::vector<std::vector<int> > opsOf(static_cast<std::size_t>(inst.devices));
  for (int op = 0; op < n; ++op) opsOf[static_cast<std::size_t>(inst.deviceOf(op))].push_back(op);
  int col = n + 1;
  for (const auto& ops : opsOf) {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      for (std::size_t j = i + 1; j < ops.size(); ++j) {
        const auto a = static_cast<std::size_t>(ops[i]);
        const auto b = static_cast<std::size_t>(ops[j]);
        if (reach[a][b] || reach[b][a]) continue;
        Cbc_addCol(model, ("y" + std::to_string(a) + "_" + std::to_string(b)).c_str(), 0.0, 1.0, 0.0, 1, 0, nullptr,
                   nullptr);
        pairs.push_back({ops[i], ops[j], col});
        pairCol[a][b] = col;
        mipValues.push_back(position[a] < position[b] ? 1.0 : 0.0);
        ++col;
      }
    }
  }

  // Rows.
  for (const Edge& e : edges) {
    const int cols[2] = {e.to, e.from};
    const double coefs[2] = {1.0, -1.0};
    Cbc_addRow(model, "", 2, cols, coefs, 'G', e.lagMs);
  }
  const double bigM = upper;
  for (const Pair& pr : pairs) {
    // y = 1: a before b → x_b − x_a − M·y ≥ d_a − M ; y = 0: b before a → x_a − x_b + M·y ≥ d_b.
    const int cols[3] = {pr.b, pr.a, pr.col};
    const double c1[3] = {1.0, -1.0, -bigM};
    Cbc_addRow(model, "", 3, cols, c1, 'G', inst.duration(pr.a) - bigM);
    const double c2[3] = {-1.0, 1.0, bigM};
    Cbc_addRow(model, "", 3, cols, c2, 'G', inst.duration(pr.b));
  }
  for (int s = 0; s < inst.stages; ++s) {
    const int last = inst.opId(s, kW, inst.microbatches - 1);
    const int cols[2] = {cCol, last};
    const double coefs[2] = {1.0, -1.0};
    Cbc_addRow(model, "", 2, cols, coefs, 'G', inst.duration(last));
  }
  // Memory at every F start on a device with a finite budget.
  for (int d = 0; d < inst.devices; ++d) {
    const std::int64_t budget = inst.budgetBytes[static_cast<std::size_t>(d)];
    if (budget >= kUnlimited) continue;
    const auto& ops = opsOf[static_cast<std::size_t>(d)];
    for (int j : ops) {
      if (inst.kindOf(j) != kF) continue;
      double rhs = static_cast<double>(budget - inst.activationBytes[static_cast<std::size_t>(inst.stageOf(j))]);
      std::vector<int> cols;
      std::vector<double> coefs;
      for (int a : ops) {
        if (a == j) continue;
        const auto s = static_cast<std::size_t>(inst.stageOf(a));
        double delta = 0;  // memory change once a has happened before j starts
        switch (inst.kindOf(a)) {
          case kF:
            delta = static_cast<double>(inst.activationBytes[s]);
            break;
          case kB:
            delta = -static_cast<double>(inst.activationBytes[s] - inst.weightGradBytes[s]);
            break;
          default:
            delta = -static_cast<double>(inst.weightGradBytes[s]);
            break;
        }
        if (delta == 0) continue;
        const auto A = static_cast<std::size_t>(a);
        const auto J = static_cast<std::size_t>(j);
        if (reach[A][J]) {
          rhs -= delta;
        } else if (reach[J][A]) {
          continue;
        } else if (pairCol[A][J] >= 0) {  // y(a before j)
          cols.push_back(pairCol[A][J]);
          coefs.push_back(delta);
        } else {  // y(j before a): a before j = 1 − y
          rhs -= delta;
          cols.push_back(pairCol[J][A]);
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
    std::vector<double> x(solution, solution + n);
    result.orders.assign(static_cast<std::size_t>(inst.devices), {});
    for (std::size_t d = 0; d < opsOf.size(); ++d) {
      std::vector<int> ops = opsOf[d];
      std::sort(ops.begin(), ops.end(), [&](int a, int b) {
        if (std::abs(x[static_cast<std::size_t>(a)] - x[static_cast<std::size_t>(b)]) > 1e-7) {
          return x[static_cast<std::size_t>(a)] < x[static_cast<std::size_t>(b)];
        }
        const auto A = static_cast<std::size_t>(a);
        const auto B = static_cast<std::size_t>(b);
        if (reach[A][B]) return true;
        if (reach[B][A]) return false;
        const int c = a < b ? pairCol[A][B] : pairCol[B][A];
        const bool firstBefore = solution[c] > 0.5;  // y(min before max)
        return a < b ? firstBefore : !firstBefore;
      });
      result.orders[d] = std::move(ops);
    }
    result.message = result.optimal ? "proven optimal" : "stopped at the time limit";
  } else {
    result.message = Cbc_isProvenInfeasible(model) ? "CBC proved the model infeasible" : "CBC found no solution";
  }
  Cbc_deleteModel(model);
  return result;
}

#endif

}  // namespace pipestudio::autosched
