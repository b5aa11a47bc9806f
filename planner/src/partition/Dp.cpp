// `balanced` and `dp` partitioners (issue 4). See Partition.hpp for the contract.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/planner/Partition.hpp"

namespace pipestudio {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Relative precision of the bottleneck searches: stage times are sums of doubles, so two
// partitions closer than this are treated as equal.
constexpr double kRelEps = 1e-8;

// Prefix sums over layers, indexed by a layer boundary j (the layers before j): 0..layers.
struct Prefix {
  std::vector<IdVector<double>> cost;  // [stage](j) = Σ_{l<j} computeMs[stage][l]
  IdVector<double> act;                // Σ activationBytes
  IdVector<double> stat;               // Σ staticBytes
};

// Σ over a per-layer row, one entry per layer boundary (negative entries count as 0).
IdVector<double> prefixSums(const std::vector<double>& perLayer) {
  IdVector<double> out(perLayer.size() + 1, 0.0);
  for (int j = 0; const double v : perLayer) {
    out[j + 1] = out[j] + std::max(0.0, v);
    ++j;
  }
  return out;
}

Prefix makePrefix(const PartitionProblem& p) {
  Prefix x;
  for (const auto& row : p.computeMs) x.cost.push_back(prefixSums(row));
  x.act = prefixSums(p.activationBytes);
  x.stat = prefixSums(p.staticBytes);
  return x;
}

double sendOf(const PartitionProblem& p, std::size_t s, int end) {
  if (s + 1 >= p.stages.size() || end <= 0) return 0.0;
  return std::max(0.0, p.sendMs[s][static_cast<std::size_t>(end - 1)]);
}

Status checkShape(const PartitionProblem& p) {
  const auto S = p.stages.size();
  if (S == 0) return Error{"partition: no virtual stages"};
  if (p.layers < static_cast<int>(S)) {
    return Error{"partition: " + std::to_string(p.layers) + " layer(s) cannot fill " + std::to_string(S) +
                 " virtual stages (every virtual stage needs at least one layer)"};
  }
  const auto L = static_cast<std::size_t>(p.layers);
  if (p.computeMs.size() != S || p.sendMs.size() != S || p.activationBytes.size() != L || p.staticBytes.size() != L) {
    return Error{"partition: inconsistent problem dimensions"};
  }
  for (std::size_t s = 0; s < S; ++s) {
    if (p.computeMs[s].size() != L || p.sendMs[s].size() != L)
      return Error{"partition: inconsistent problem dimensions"};
  }
  return Status{};
}

// Sparse table for range-minimum with argmin over a fixed array (rebuilt per stage).
// m_idx[k](i): the argmin over [i, i + 2^k).
class RangeMin {
 public:
  void build(const IdVector<double>& v) {
    const int n = v.size();  // a local: the int stores below could alias a member
    std::size_t levels = 1;
    while ((1 << levels) <= n) ++levels;
    m_idx.resize(levels);
    m_idx[0].resize(n);
    for (int i = 0; i < n; ++i) m_idx[0][i] = i;
    m_v = &v;
    for (std::size_t k = 1; k < levels; ++k) {
      const int len = 1 << k;
      const IdVector<int>& prev = m_idx[k - 1];
      IdVector<int>& row = m_idx[k];
      row.resize(n >= len ? n - len + 1 : 0);
      for (int i = 0; i + len <= n; ++i) {
        const int a = prev[i];
        const int b = prev[i + len / 2];
        row[i] = v[b] < v[a] ? b : a;
      }
    }
  }
  // argmin over [lo, hi], inclusive, lo <= hi.
  int query(int lo, int hi) const {
    const int len = hi - lo + 1;
    std::size_t k = 0;
    while ((2 << k) <= len) ++k;
    const int a = m_idx[k][lo];
    const int b = m_idx[k][hi + 1 - (1 << k)];
    return (*m_v)[b] < (*m_v)[a] ? b : a;
  }

 private:
  const IdVector<double>* m_v = nullptr;
  std::vector<IdVector<int>> m_idx;  // per level
};

struct Solution {
  bool feasible = false;
  std::vector<int> firstLayer;
  double sum = kInf;
  double max = kInf;
};

// Minimum Σ stage time over partitions whose every stage time is ≤ boundMs and fits its
// memory budget. Stage s over [i, j): t = C_s[j] + send_s(j) − C_s[i], so
//   dp[s+1][j] = C_s[j] + send_s(j) + min_{i ∈ window} (dp[s][i] − C_s[i]),
// where the window [lo, j−1] comes from the bound (C_s[i] ≥ C_s[j] + send − bound) and from
// memory (G_s[i] ≥ G_s[j] − budget, G = static + live·activation prefix): both prefixes are
// non-decreasing, so lo is a binary search and the min a sparse-table query.
class Solver {
 public:
  Solver(const PartitionProblem& p, const Prefix& x) : m_p(p), m_x(x) {
    const auto S = p.stages.size();
    const int L = p.layers;
    m_dp.assign(S + 1, IdVector<double>(L + 1, kInf));
    m_arg.assign(S + 1, IdVector<int>(L + 1, -1));
    m_val.resize(L + 1);
    // Bound-independent parts, computed once: the stage's time up to its end (C_s[j] + send)
    // and the first start the memory budget allows.
    m_top.assign(S, IdVector<double>(L + 1, 0.0));
    m_memLo.assign(S, IdVector<int>(L + 1, 0));
    IdVector<double> mem(L + 1);
    for (std::size_t s = 0; s < S; ++s) {
      const double live = std::max(0, p.stages[s].liveMicrobatches);
      const double budget = p.stages[s].memoryBudgetBytes;
      for (int i = 0; i <= L; ++i) mem[i] = x.stat[i] + live * x.act[i];
      for (int j = 1; j <= L; ++j) {
        m_top[s][j] = x.cost[s][j] + sendOf(p, s, j);
        if (!std::isinf(budget)) {
          const double need = mem[j] - budget * (1.0 + 1e-12);
          m_memLo[s][j] = static_cast<int>(std::lower_bound(mem.begin(), mem.begin() + j, need) - mem.begin());
        }
      }
    }
  }

  Solution solve(double boundMs) {
    const auto S = m_p.stages.size();
    const int L = m_p.layers;
    const double bound = std::isinf(boundMs) ? kInf : boundMs * (1.0 + 1e-12) + 1e-12;
    for (auto& row : m_dp) std::fill(row.begin(), row.end(), kInf);
    m_dp[0][0] = 0.0;
    for (std::size_t s = 0; s < S; ++s) {
      const auto& C = m_x.cost[s];
      const auto& topRow = m_top[s];
      const auto& memLo = m_memLo[s];
      for (int i = 0; i <= L; ++i) m_val[i] = m_dp[s][i] - C[i];
      m_rmq.build(m_val);
      // Stage s ends at j: at least s+1 layers before, S−s−1 after.
      const int jLo = static_cast<int>(s) + 1;
      const int jHi = L - static_cast<int>(S - s - 1);
      bool any = false;
      for (int j = jLo; j <= jHi; ++j) {
        const double top = topRow[j];
        int lo = std::max(static_cast<int>(s), memLo[j]);  // stage s−1 ended at ≥ s
        if (!std::isinf(bound)) {
          const double need = top - bound;
          if (C[lo] < need) lo = static_cast<int>(std::lower_bound(C.begin() + lo, C.begin() + j, need) - C.begin());
        }
        if (lo > j - 1) continue;
        const int i = m_rmq.query(lo, j - 1);
        const double v = m_val[i];
        if (std::isinf(v)) continue;
        m_dp[s + 1][j] = top + v;
        m_arg[s + 1][j] = i;
        any = true;
      }
      if (!any) return {};
    }
    if (std::isinf(m_dp[S][L])) return {};
    Solution out;
    out.feasible = true;
    out.firstLayer.assign(S, 0);
    int j = L;
    for (std::size_t s = S; s > 0; --s) {
      const int i = m_arg[s][j];
      out.firstLayer[s - 1] = i;
      j = i;
    }
    const PartitionResult r = evaluatePartition(m_p, out.firstLayer);
    out.sum = r.sumMs;
    out.max = r.maxMs;
    return out;
  }

 private:
  const PartitionProblem& m_p;
  const Prefix& m_x;
  // Per stage (std::vector), per layer boundary j (IdVector).
  std::vector<IdVector<double>> m_dp;
  std::vector<IdVector<int>> m_arg;
  IdVector<double> m_val;
  std::vector<IdVector<double>> m_top;
  std::vector<IdVector<int>> m_memLo;
  RangeMin m_rmq;
};

// Why no split meets the stages' memory budgets, in numbers that agree with each other. The ends
// stage s can reach form an interval [s + 1, reach]: a stage that ends earlier holds fewer layers.
// Stage s reaches furthest by starting as late as it can (the same end needs less from a later
// start); when even that one layer does not fit, only a lighter single layer it could start at
// moves it on. The first stage that holds none of the layers it could start at, or the last
// stage left with more than its budget, is the reason.
Error memoryError(const PartitionProblem& p) {
  const int S = static_cast<int>(p.stages.size());
  const auto fits = [](double bytes, double budget) { return bytes <= budget * (1.0 + 1e-12); };
  int latest = 0;  // the latest layer stage s can start at (it can start at any of s..latest)
  for (int s = 0; s < S; ++s) {
    const PartitionStage& st = p.stages[static_cast<std::size_t>(s)];
    const double budget = st.memoryBudgetBytes;
    std::ostringstream msg;
    msg << "partition dp: memory infeasible: virtual stage " << s << " on device " << st.device;
    const std::string need = " (static + " + std::to_string(st.liveMicrobatches) + " live microbatches × activations)";
    const std::string before = s == 0 ? std::string()
                                      : "; virtual stages 0.." + std::to_string(s - 1) + " hold at most layers 0.." +
                                            std::to_string(latest - 1) + " within theirs";
    if (s == S - 1) {
      const double rest = stageMemoryBytes(p, s, latest, p.layers);
      if (fits(rest, budget)) break;  // not a memory failure after all
      msg << " would have to hold layers " << latest << ".." << p.layers - 1 << ", " << formatBytes(rest) << need
          << ", within its budget of " << formatBytes(budget) << before
          << " (a device's memory budget is shared among its virtual stages by the microbatches each holds at its "
             "peak)";
      return Error{msg.str()};
    }
    const int lastEnd = p.layers - (S - 1 - s);  // a layer left for every later stage
    const auto single = [&](int l) { return stageMemoryBytes(p, s, l, l + 1); };
    int start = latest;  // the latest start whose one layer fits
    while (start >= s && !fits(single(start), budget)) --start;
    if (start < s) {
      int lightest = s;
      for (int l = s; l <= latest; ++l) {
        if (single(l) < single(lightest)) lightest = l;
      }
      msg << " cannot hold even one of the layers " << s << ".." << latest << " it could start at within its budget of "
          << formatBytes(budget) << ": the lightest, layer " << lightest << ", needs " << formatBytes(single(lightest))
          << need << before;
      return Error{msg.str()};
    }
    // From the latest start, as many layers as fit (from an earlier one, only that layer).
    int end = start + 1;
    if (start == latest) {
      double held = single(start);
      while (end < lastEnd && fits(held + single(end), budget)) held += single(end++);
    }
    latest = end;
  }
  return Error{"partition dp: memory infeasible: no split meets the stages' memory budgets"};
}

}  // namespace

PartitionResult evaluatePartition(const PartitionProblem& p, const std::vector<int>& firstLayer) {
  PartitionResult r;
  r.firstLayer = firstLayer;
  const auto S = firstLayer.size();
  r.stageMs.assign(S, 0.0);
  for (std::size_t s = 0; s < S; ++s) {
    const int a = firstLayer[s];
    const int b = s + 1 < S ? firstLayer[s + 1] : p.layers;
    double t = 0;
    for (int l = a; l < b; ++l) t += std::max(0.0, p.computeMs[s][static_cast<std::size_t>(l)]);
    t += sendOf(p, s, b);
    r.stageMs[s] = t;
    r.sumMs += t;
    r.maxMs = std::max(r.maxMs, t);
    const double budget = p.stages[s].memoryBudgetBytes;
    if (budget > 0 && !std::isinf(budget)) {
      r.budgetShare = std::max(r.budgetShare, stageMemoryBytes(p, static_cast<int>(s), a, b) / budget);
    }
  }
  r.objectiveMs = r.sumMs + static_cast<double>(std::max(0, p.microbatches - 1)) * r.maxMs;
  return r;
}

double stageMemoryBytes(const PartitionProblem& p, int stage, int first, int end) {
  const double live = std::max(0, p.stages[static_cast<std::size_t>(stage)].liveMicrobatches);
  double bytes = 0;
  for (int l = first; l < end; ++l) {
    bytes += std::max(0.0, p.staticBytes[static_cast<std::size_t>(l)]) +
             live * std::max(0.0, p.activationBytes[static_cast<std::size_t>(l)]);
  }
  return bytes;
}

// Among the partitions whose every stage takes at most `boundMs`, the most even one: the least
// Σ stage time². Min-max alone leaves the other stages arbitrary (with 82 layers over 40 stages
// the largest stage holds 3 whatever the rest do), and schedules with several stages per device
// (interleaved, V) load a device with the sum of its stages. O(S·L·W) for windows of W
// boundaries; nullopt when that exceeds a fixed budget (the min-max partition stands).
// With `mindMemory`, only stages within their memory budgets (static bytes + live microbatches ×
// activations), scaled by `budgetScale`, are allowed: the split that is even and fits the
// devices is preferred.
std::optional<std::vector<int>> evenestUnderBound(const PartitionProblem& p, const Prefix& x, double boundMs,
                                                  bool mindMemory, double budgetScale = 1.0) {
  const int S = static_cast<int>(p.stages.size());
  const int L = p.layers;
  if (static_cast<double>(S) * L * L > 2e8) return std::nullopt;
  const auto fits = [&](int s, int i, int j) {
    if (!mindMemory) return true;
    const PartitionStage& st = p.stages[static_cast<std::size_t>(s)];
    const double bytes = x.stat[j] - x.stat[i] + st.liveMicrobatches * (x.act[j] - x.act[i]);
    return bytes <= st.memoryBudgetBytes * budgetScale;
  };
  // best(s, j): least Σ t² of stages 0..s−1 over layers [0, j); from(s, j): where stage s−1 began.
  Grid<double> best(S + 1, L + 1, kInf);
  Grid<int> from(S + 1, L + 1, -1);
  best(0, 0) = 0;
  for (int s = 0; s < S; ++s) {
    const IdVector<double>& c = x.cost[static_cast<std::size_t>(s)];
    const int lastEnd = L - (S - 1 - s);  // leave a layer for every later stage
    for (int j = s + 1; j <= lastEnd; ++j) {
      for (int i = j - 1; i >= s; --i) {
        const double t = c[j] - c[i];
        if (t > boundMs) break;  // earlier starts only grow the stage
        if (best(s, i) == kInf || !fits(s, i, j)) continue;
        const double v = best(s, i) + t * t;
        if (v < best(s + 1, j)) {
          best(s + 1, j) = v;
          from(s + 1, j) = i;
        }
      }
    }
  }
  if (best(S, L) == kInf) return std::nullopt;
  std::vector<int> first(static_cast<std::size_t>(S), 0);
  for (int s = S, j = L; s > 0; --s) {
    j = from(s, j);
    first[static_cast<std::size_t>(s - 1)] = j;
  }
  return first;
}

// The most even split under `boundMs` whose stages fit their memory budgets scaled by `slack`
// times the smallest common factor ≥ 1 that admits one (bisected to 0.1 %); nullopt when none
// does below a factor of 2^20 or the split search is too large.
std::optional<std::vector<int>> leastOverrunUnderBound(const PartitionProblem& p, const Prefix& x, double boundMs,
                                                       double slack) {
  auto scaled = [&](double factor) { return evenestUnderBound(p, x, boundMs, true, factor); };
  double tight = 1.0;
  double loose = 2.0;
  std::optional<std::vector<int>> found = scaled(loose);
  while (!found && loose < 1048576.0) {
    tight = loose;
    loose *= 2.0;
    found = scaled(loose);
  }
  while (found && loose - tight > 1e-3 * loose) {
    const double mid = 0.5 * (tight + loose);
    if (auto split = scaled(mid)) {
      loose = mid;
      found = std::move(split);
    } else {
      tight = mid;
    }
  }
  if (found && slack > 1.0) {
    if (auto looser = scaled(loose * slack)) return looser;
  }
  return found;
}

// Bisects the bottleneck bound between `lo` and best.max for at most `iterations` halvings,
// keeping in `best` the split of the smallest bound whose split `accepted` takes: the final
// lower end (a bound not accepted), or nullopt when `stop` (asked after each halving) ended it.
template <class Accept, class Stop>
std::optional<double> lowerBottleneck(Solver& solver, Solution& best, double lo, int iterations, const Accept& accepted,
                                      const Stop& stop) {
  double hi = best.max;
  for (int it = 0; it < iterations && hi - lo > kRelEps * std::max(hi, 1e-300); ++it) {
    const double mid = 0.5 * (lo + hi);
    Solution s = solver.solve(mid);
    if (accepted(s)) {
      hi = s.max;
      best = std::move(s);
    } else {
      lo = mid;
    }
    if (stop()) return std::nullopt;
  }
  return lo;
}

// The smallest largest-stage time of `q`'s splits (its memory budgets and sends as they are),
// bisected with the DP's feasibility (reachability); infeasible when no split meets the budgets.
Solution minMaxSplit(const PartitionProblem& q, const Prefix& x) {
  Solver solver(q, x);
  Solution best = solver.solve(kInf);
  if (!best.feasible) return best;
  (void)lowerBottleneck(
      solver, best, 0, 200, [](const Solution& s) { return s.feasible; }, [] { return false; });
  return best;
}

Expected<PartitionResult> balancedPartition(const PartitionProblem& p, const BalancedMemory& memory) {
  PS_RETURN_IF_ERROR(checkShape(p));
  // Min-max of compute only: sends and memory are not part of `balanced`. A greedy "fill each
  // stage up to the bound" is not exact once stages must be non-empty and devices differ, so
  // the bound is searched with the DP's feasibility (reachability) instead.
  PartitionProblem q = p;
  for (auto& row : q.sendMs) std::fill(row.begin(), row.end(), 0.0);
  if (memory.withinBudgets > 0) {
    for (PartitionStage& st : q.stages) st.memoryBudgetBytes *= memory.withinBudgets;
    const Prefix withMemory = makePrefix(q);
    const Solution fit = minMaxSplit(q, withMemory);
    if (!fit.feasible) return Error{"partition balanced: no split meets the stages' memory budgets"};
    if (auto even = evenestUnderBound(q, withMemory, fit.max * (1 + kRelEps), true)) {
      return evaluatePartition(p, *even);
    }
    return evaluatePartition(p, fit.firstLayer);
  }
  for (auto& st : q.stages) st.memoryBudgetBytes = kInf;
  const Prefix x = makePrefix(q);
  const Solution best = minMaxSplit(q, x);
  if (!best.feasible) return Error{"partition balanced: internal error (no partition without a bound)"};
  const double hi = best.max;
  // The most even split at the bound that fits the memory budgets, else the most even one. The
  // budgets add up each stage's own peak of in-flight microbatches, which the stages of one
  // device reach at different moments (interleaved schedules), so they can overstate a device
  // that fits; the most even split is what the simulator then checks. When it did not fit, the
  // caller asks for an `overrunSlack`: the split at the same bound within the budgets scaled by
  // it times the smallest common factor that admits one — at 1, the split leaning least on the
  // stages that hold the most in flight; larger, closer to the most even one.
  const Prefix withMemory = makePrefix(p);
  const double bound = hi * (1 + kRelEps);
  if (auto even = evenestUnderBound(p, withMemory, bound, true, memory.budgetScale)) {
    return evaluatePartition(p, *even);
  }
  if (memory.overrunSlack >= 1.0) {
    if (auto split = leastOverrunUnderBound(p, withMemory, bound, memory.overrunSlack)) {
      return evaluatePartition(p, *split);
    }
  }
  if (auto even = evenestUnderBound(q, x, bound, false)) return evaluatePartition(p, *even);
  return evaluatePartition(p, best.firstLayer);
}

Expected<PartitionResult> dpPartition(const PartitionProblem& p, const SolveControl& control) {
  PS_RETURN_IF_ERROR(checkShape(p));
  const Prefix x = makePrefix(p);
  Solver solver(p, x);
  const double mMinus1 = static_cast<double>(std::max(0, p.microbatches - 1));

  Solution top = solver.solve(kInf);
  if (!top.feasible) return memoryError(p);
  if (control.cancelled()) return Error::cancelled();

  // Tmin: the smallest feasible bottleneck (every partition's max is ≥ it).
  auto cancelled = [&] { return control.cancelled(); };
  Solution tminSol = top;
  const std::optional<double> tMinLo = lowerBottleneck(
      solver, tminSol, 0, 100, [](const Solution& s) { return s.feasible; }, cancelled);
  if (!tMinLo) return Error::cancelled();
  const double tMin = tminSol.max;

  // Walk the levels of f(T) = min Σ under bottleneck T. A level's best objective is at the
  // smallest T with the same minimum sum; below it the sum grows. Only T with
  // fInf + (m−1)·T < best can win, so the walk starts at that bound (close to Tmin when m is
  // large) and goes down; it stops once level + (m−1)·Tmin ≥ best.
  Solution best = tminSol;
  double bestObj = tminSol.sum + mMinus1 * tminSol.max;
  const double fInf = top.sum;
  if (mMinus1 == 0) {
    best = top;
    bestObj = top.sum;
  }
  auto upperBound = [&] { return mMinus1 > 0 ? (bestObj - fInf) / mMinus1 : kInf; };
  Solution cur = upperBound() >= top.max ? std::move(top) : solver.solve(upperBound());
  for (int level = 0; level < 100000 && cur.feasible && mMinus1 > 0; ++level) {
    if (control.progress) control.progress(std::min(0.99, 0.1 + 0.01 * level));
    if (cur.sum + mMinus1 * tMin >= bestObj * (1 - 1e-12)) break;
    const double levelSum = cur.sum;
    const double tol = kRelEps * std::abs(levelSum) + 1e-12;
    // This level beats `best` only below Tcut; probe there first. If the minimum sum under
    // Tcut is already larger, every level between cannot win either (their sums are ≥ this
    // one's and their bottlenecks ≥ Tcut): jump straight to the probe's level.
    const double tCut = (bestObj - levelSum) / mMinus1;
    Solution probe = tCut < cur.max ? solver.solve(tCut * (1 - kRelEps)) : cur;
    if (control.cancelled()) return Error::cancelled();
    if (!probe.feasible) break;
    if (probe.sum > levelSum + tol) {
      cur = std::move(probe);
      continue;
    }
    Solution atLevel = std::move(probe);
    auto onLevel = [&](const Solution& s) { return s.feasible && s.sum <= levelSum + tol; };
    if (!lowerBottleneck(solver, atLevel, *tMinLo, 100, onLevel, cancelled)) return Error::cancelled();
    const double h = atLevel.max;
    const double obj = atLevel.sum + mMinus1 * atLevel.max;
    if (obj < bestObj) {
      bestObj = obj;
      best = atLevel;
    }
    if (h <= tMin * (1 + kRelEps)) break;
    cur = solver.solve(std::min(h * (1 - kRelEps) - 1e-15, upperBound()));
  }
  if (control.progress) control.progress(1.0);
  return evaluatePartition(p, best.firstLayer);
}

}  // namespace pipestudio
