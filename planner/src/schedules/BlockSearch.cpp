// The building-block search of the Controllable Memory authors (Qi, Wan, Amar, Lin 2024,
// "Pipeline Parallelism with Controllable Memory", §3–4 and Appendix A), after the reference
// implementation sail-sg/zero-bubble-pipeline-parallelism @ 39f2c18,
// megatron/core/pipeline_parallel/zerobubble/scheduler/v_auto_schedule.py (schedule() and the
// functions it calls). On one V per device, with every pass one slot, it builds the
// reference's grids op for op; the choice among them is ours (below).
//
// A grid row per device holds one pass per slot: F/f (forward of chunk 0/1), B/b (input
// gradient of chunk 1/0: B comes first going backwards), W/w (their weight gradients), ' '
// idle. Activation memory in units of one chunk's activation: F/f take one, W/w free it.
//   * Blocks: device 0's pattern places F, f, B, b (and W, w in the next free slots after B,
//     b) in a period of 6 slots; each further device shifts F, f, B, b by uniform offsets
//     (δF0, δF1, δB1, δB0) = (k, −1, k, −1), k = 1…5, modulo 6 — one offset for the first
//     len0 devices, another (no larger) for the rest. Shifts that collide are no block.
//   * Repeating: each row repeats its pattern; each device keeps, per pass kind, m copies
//     starting at the first one after the previous device's (F, B from device 0 on; f, b from
//     device p−1 back), so that the chains line up.
//   * Squeezing: every pass moves to the earliest slot its device and its input allow.
//   * Reordering: the warm-up before the first b is rewritten (F passes, then F f pairs, then
//     B W F/f triples) without raising the peak; the cool-down after the last f puts the B
//     and b passes tight and the W passes back into the holes; then every hole takes the
//     next pass that may move there without raising the peak.
// schedule() tries every block (60 patterns × 15 offset pairs × p−1 splits) whose peak stays
// within the memory limit and keeps the fastest by its own timing. Here every block that
// survives is a candidate (VBlockSearchResult), and the caller times them all on the real
// per-stage costs and transfers and keeps the fastest; so it never loses to the reference's
// pick, which is among them.
#include <algorithm>
#include <array>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_set>

#include "pipestudio/common/Index.hpp"
#include "schedules/Generators.hpp"

namespace pipestudio::schedules {
namespace {

constexpr int kPattern = 6;
constexpr const char* kPasses = "FfBbWw";
using Grid = std::vector<std::string>;

// The pass a slot holds (its place in kPasses), or none for an idle slot.
std::optional<std::size_t> passIndex(char c) {
  switch (c) {
    case 'F':
      return 0;
    case 'f':
      return 1;
    case 'B':
      return 2;
    case 'b':
      return 3;
    case 'W':
      return 4;
    case 'w':
      return 5;
    default:
      return std::nullopt;
  }
}
bool isForward(char c) { return c == 'F' || c == 'f'; }
bool isWeight(char c) { return c == 'W' || c == 'w'; }

// get_peak_mem (per row when `all`).
std::vector<int> rowPeaks(const Grid& g) {
  std::vector<int> out;
  for (const std::string& row : g) {
    int peak = 0, mem = 0;
    for (char c : row) {
      if (isForward(c)) ++mem;
      if (isWeight(c)) --mem;
      peak = std::max(peak, mem);
    }
    out.push_back(peak);
  }
  return out;
}
int peakMem(const Grid& g) {
  int peak = 0;
  for (int r : rowPeaks(g)) peak = std::max(peak, r);
  return peak;
}

using Pattern = std::array<int, kPattern>;  // slot of F, f, B, b, W, w (−1: none)

// fill_w_in_building_block.
Pattern fillW(Pattern pattern) {
  std::array<bool, kPattern> used{};
  for (int v : pattern) {
    if (v >= 0) used[static_cast<std::size_t>(v)] = true;
  }
  for (const auto& [b, w] : {std::pair<std::size_t, std::size_t>{2, 4}, {3, 5}}) {
    for (int j = 0; j < kPattern; ++j) {
      const int pos = (pattern[b] + j) % kPattern;
      const auto slot = static_cast<std::size_t>(pos);
      if (!used[slot]) {
        pattern[w] = pos;
        used[slot] = true;
        break;
      }
    }
  }
  return pattern;
}

// get_building_block.
std::optional<std::vector<Pattern>> buildingBlock(const Pattern& first, const std::array<int, 4>& offset0,
                                                  const std::array<int, 4>& offset1, int len0, int p) {
  std::vector<Pattern> block{first};
  for (int i = 0; i + 1 < p; ++i) {
    const Pattern& last = block.back();
    Pattern next;
    next.fill(-1);
    std::array<bool, kPattern> used{};
    const auto& offset = i < len0 ? offset0 : offset1;
    for (std::size_t v = 0; v < 4; ++v) {
      const int pos = (last[v] + offset[v] + kPattern) % kPattern;
      const auto slot = static_cast<std::size_t>(pos);
      if (used[slot]) return std::nullopt;
      used[slot] = true;
      next[v] = pos;
    }
    block.push_back(fillW(next));
  }
  return block;
}

// init_repeated_schedule: one row per pattern of the block (one per device).
Grid repeated(int p, int m, const std::vector<Pattern>& block) {
  Grid g;
  const int length = 4 * p + m + 1;
  for (const Pattern& pattern : block) {
    std::string unit(kPattern, ' ');
    for (std::size_t v = 0; v < kPattern; ++v) {
      if (pattern[v] >= 0) unit[static_cast<std::size_t>(pattern[v])] = kPasses[v];
    }
    std::string row;
    row.reserve(unit.size() * static_cast<std::size_t>(length));
    for (int k = 0; k < length; ++k) row += unit;
    g.push_back(std::move(row));
  }
  return g;
}

// clear_invalid.
void clearFrom(std::string& row, long pos, int direction) {
  while (pos >= 0 && pos < static_cast<long>(row.size())) {
    row[static_cast<std::size_t>(pos)] = ' ';
    pos += direction * kPattern;
  }
}

// The pass at `slot` of a row, or '\0' outside the row.
char passAt(const std::string& row, long slot) {
  return inRange(row, slot) ? row[static_cast<std::size_t>(slot)] : '\0';
}

// clear_invalid_index: keep m copies of each pass per row, lined up along the chains.
void keepMCopies(Grid& g, int m) {
  const std::size_t p = g.size();
  long index = kPattern;
  for (char id : std::string("FfBb")) {
    const bool down = id == 'F' || id == 'B';
    for (std::size_t n = 0; n < p; ++n) {
      std::string& row = g[down ? n : p - 1 - n];
      for (int j = 0; j < kPattern; ++j) {
        if (passAt(row, index) == id) {
          clearFrom(row, index - kPattern, -1);
          clearFrom(row, index + static_cast<long>(kPattern) * m, 1);
          ++index;
          if (id == 'B' || id == 'b') {
            const char w = id == 'B' ? 'W' : 'w';
            for (int k = 0; k < kPattern; ++k) {
              const long at = index + k;
              if (passAt(row, at) == w) {
                clearFrom(row, at - kPattern, -1);
                clearFrom(row, at + static_cast<long>(kPattern) * m, 1);
                break;
              }
            }
          }
          break;
        }
        ++index;
      }
    }
  }
}

// Per (microbatch · p + device, pass) slot index, −1 when not (yet) placed.
class SlotIndex {
 public:
  SlotIndex(std::size_t p, int m) : m_p(p), m_slots(p * static_cast<std::size_t>(m) * kPattern, -1) {}
  long& at(int mb, std::size_t device, std::size_t pass) {
    return m_slots[(static_cast<std::size_t>(mb) * m_p + device) * kPattern + pass];
  }

 private:
  std::size_t m_p;
  std::vector<long> m_slots;
};

// squeeze_without_change_order. False where the reference would fail an assertion.
bool squeeze(Grid& g, int m) {
  const std::size_t p = g.size();
  std::size_t length = g.front().size();
  for (const auto& row : g) {
    if (row.size() != length) return false;
  }
  Grid out(p, std::string(length, ' '));
  std::vector<std::array<int, kPattern>> count(p, std::array<int, kPattern>{});
  SlotIndex index(p, m);
  std::vector<long> next(p, 0);
  for (std::size_t j = 0; j < length; ++j) {
    for (int dir = 0; dir < 2; ++dir) {
      for (std::size_t n = 0; n < p; ++n) {
        const std::size_t i = dir == 0 ? n : p - 1 - n;
        const char c = g[i][j];
        if (c == ' ') continue;
        const bool lower = c == 'f' || c == 'b' || c == 'w';
        if (dir == 0 && lower) continue;
        if (dir == 1 && !lower) continue;
        const auto pass = passIndex(c);
        if (!pass) return false;
        const int cnt = count[i][*pass];
        if (cnt >= m) return false;
        long slot = 0;
        if (isWeight(c) || (i == 0 && (c == 'F' || c == 'B')) || (i == p - 1 && (c == 'f' || c == 'b'))) {
          slot = next[i];
        } else if (c == 'F' || c == 'B') {
          const long dep = index.at(cnt, i - 1, *pass);
          if (dep < 0) return false;
          slot = std::max(dep + 1, next[i]);
        } else {
          const long dep = index.at(cnt, i + 1, *pass);
          if (dep < 0) return false;
          slot = std::max(dep + 1, next[i]);
        }
        if (slot >= static_cast<long>(length)) return false;
        out[i][static_cast<std::size_t>(slot)] = c;
        count[i][*pass] = cnt + 1;
        index.at(cnt, i, *pass) = slot;
        next[i] = slot + 1;
      }
    }
  }
  const long newLength = *std::max_element(next.begin(), next.end());
  for (auto& row : out) row.resize(static_cast<std::size_t>(newLength));
  g = std::move(out);
  return true;
}

// Python-style index into a row (negative counts from the end); false when outside.
bool pyIndex(const std::string& row, long index, std::size_t& at) {
  const long n = static_cast<long>(row.size());
  if (index < 0) index += n;
  if (index < 0 || index >= n) return false;
  at = static_cast<std::size_t>(index);
  return true;
}

// process_warmup_without_increasing_peak_mem.
bool reorderWarmUp(Grid& g, int m) {
  const int p = static_cast<int>(g.size());
  const int peak = std::min(peakMem(g), 2 * p);
  for (int i = 0; i < p; ++i) {
    const int wantF1 = std::min({i + 1, peak / 2, m});
    const int wantF0 = std::min(peak - wantF1, m);
    std::string& row = g[static_cast<std::size_t>(i)];
    int cF = 0, cF1 = 0, cB = 0, cW = 0;
    for (std::size_t j = 0; j < row.size(); ++j) {
      const char c = row[j];
      if (c == 'F')
        ++cF;
      else if (c == 'f')
        ++cF1;
      else if (c == 'B')
        ++cB;
      else if (c == 'W')
        ++cW;
      else if (c == 'b')
        break;
      else if (c != ' ')
        return false;
      row[j] = ' ';
    }
    long j = i;
    int uF = 0, uF1 = 0, uB = 0, uW = 0;
    auto put = [&](char c) {
      std::size_t at = 0;
      if (!pyIndex(row, j, at)) return false;
      row[at] = c;
      return true;
    };
    for (int k = 0; k < 2 * (p - 1 - i); ++k) {
      if (uF < wantF0 && uF < cF) {
        if (!put('F')) return false;
        ++uF;
      }
      ++j;
    }
    for (int k = 0; k < i + 1; ++k) {
      if (uF < wantF0 && uF < cF) {
        if (!put('F')) return false;
        ++uF;
      }
      ++j;
      if (uF1 < wantF1 && uF1 < cF1) {
        if (!put('f')) return false;
        ++uF1;
      }
      ++j;
    }
    while (uF < cF || uF1 < cF1 || uB < cB || uW < cW) {
      if (uB < cB) {
        if (!put('B')) return false;
        ++uB;
      }
      ++j;
      if (uW < cW) {
        if (!put('W')) return false;
        ++uW;
      }
      ++j;
      if (uF1 < cF1) {
        if (uF1 >= uF) return false;
        if (!put('f')) return false;
        ++uF1;
      } else if (uF < cF) {
        if (!put('F')) return false;
        ++uF;
      }
      ++j;
    }
  }
  return true;
}

// process_cooldown.
bool reorderCoolDown(Grid& g, int m) {
  const int p = static_cast<int>(g.size());
  const int peak = peakMem(g);
  if (peak > 2 * p) return false;
  const int maxB0 = std::min((peak + 1) / 2, m);
  const int maxB1 = std::min(peak - maxB0, m);
  long start = -1;
  for (int i = 0; i < p; ++i) {
    std::string& row = g[static_cast<std::size_t>(i)];
    int cB = 0, cB0 = 0, cW = 0, cW0 = 0;
    const std::size_t f1 = row.rfind('f');
    const long lastF1 = f1 == std::string::npos ? -1 : static_cast<long>(f1);
    for (auto it = row.rbegin(); it != row.rend(); ++it) {
      char& c = *it;
      if (c == 'B' && cB < i + 1 && cB < maxB1) {
        c = ' ';
        ++cB;
      }
      if (c == 'b' && cB0 < maxB0) {
        c = ' ';
        ++cB0;
      }
    }
    for (auto it = row.rbegin(); it != row.rend(); ++it) {
      char& c = *it;
      if (cW >= cB && cW0 >= cB0 && cW + cW0 >= peak) break;
      if (c == 'W') {
        c = ' ';
        ++cW;
      }
      if (c == 'w') {
        c = ' ';
        ++cW0;
      }
    }
    if (i == 0) start = lastF1;
    for (int k = 0; k < cB0; ++k) {
      std::size_t at = 0;
      if (!pyIndex(row, start - i + 2 * p - 2 * k, at) || row[at] != ' ') return false;
      row[at] = 'b';
    }
    for (int k = 0; k < cB; ++k) {
      std::size_t at = 0;
      if (!pyIndex(row, start + 1 + i - 2 * k, at)) return false;
      row[at] = 'B';
    }
  }
  std::size_t length = 0;
  for (auto& row : g) {
    int cW = 0, cW0 = 0;
    // Holes after the last W/w take the W/w passes still owed.
    const std::size_t lastW = row.find_last_of("Ww");
    const std::size_t fillFrom = lastW == std::string::npos ? 0 : lastW + 1;
    for (std::size_t j = 0; j < row.size(); ++j) {
      const char c = row[j];
      if (c == 'B')
        ++cW;
      else if (c == 'b')
        ++cW0;
      else if (c == 'W')
        --cW;
      else if (c == 'w')
        --cW0;
      if (c == ' ' && j >= fillFrom) {
        if (cW > 0) {
          row[j] = 'W';
          --cW;
        } else if (cW0 > 0) {
          row[j] = 'w';
          --cW0;
        }
      }
    }
    row.append(static_cast<std::size_t>(std::max(0, cW)), 'W');
    row.append(static_cast<std::size_t>(std::max(0, cW0)), 'w');
    length = std::max(length, row.size());
  }
  for (auto& row : g) row.resize(length, ' ');
  return squeeze(g, m);
}

// release_w_in_warmup_if_under_memory.
void releaseWInWarmUp(Grid& g, int peakLimit) {
  const auto peaks = rowPeaks(g);
  const int peak = peakLimit > 0 ? peakLimit : *std::max_element(peaks.begin(), peaks.end());
  const int minPeak = *std::min_element(peaks.begin(), peaks.end());
  const std::size_t length = g.front().size();
  for (std::size_t i = 0; i < g.size(); ++i) {
    int cnt = 0;
    std::string padding(static_cast<std::size_t>(std::max(0, peak - minPeak)), ' ');
    for (std::size_t j = 0; j < length; ++j) {
      if (peaks[i] + cnt >= peak) break;
      char& c = g[i][j];
      if (isWeight(c)) {
        padding[static_cast<std::size_t>(cnt)] = c;
        c = ' ';
        ++cnt;
      }
    }
    g[i] += padding;
  }
}

// reorder_greedily_without_increasing_peak_mem: every hole takes the next pass (of each
// kind, its first occurrence) that may move there without raising the peak.
bool reorderGreedily(Grid& g, int m) {
  const std::size_t p = g.size();
  const int peak = peakMem(g);
  const std::size_t length = g.front().size();
  for (const auto& row : g) {
    if (row.size() != length) return false;
  }
  // Per row and pass: one past the slot of its last occurrence (0: none).
  std::vector<std::array<std::size_t, kPattern>> end(p, std::array<std::size_t, kPattern>{});
  for (std::size_t i = 0; i < p; ++i) {
    for (std::size_t j = 0; j < length; ++j) {
      if (const auto pass = passIndex(g[i][j])) end[i][*pass] = j + 1;
    }
  }
  std::vector<int> mem(p, 0);
  std::vector<std::array<int, kPattern>> count(p, std::array<int, kPattern>{});
  SlotIndex index(p, m);
  auto placed = [&](std::size_t i, char c, std::size_t j) {
    const auto pass = passIndex(c);
    if (!pass) return false;
    int& cnt = count[i][*pass];
    if (cnt >= m) return false;
    index.at(cnt, i, *pass) = static_cast<long>(j);
    ++cnt;
    if (isForward(c)) ++mem[i];
    if (isWeight(c)) --mem[i];
    return true;
  };
  for (std::size_t j = 0; j < length; ++j) {
    for (std::size_t i = 0; i < p; ++i) {
      std::string& row = g[i];
      if (row[j] != ' ') {
        if (!placed(i, row[j], j)) return false;
        continue;
      }
      std::array<bool, kPattern> available{};
      int left = 0;
      for (std::size_t c = 0; c < available.size(); ++c) {
        available[c] = end[i][c] > j + 1;
        left += available[c] ? 1 : 0;
      }
      int memDelta = 0, peakDelta = 0;
      for (std::size_t k = j + 1; k < length && left > 0; ++k) {
        const char c = row[k];
        if (isForward(c)) ++memDelta;
        if (isWeight(c)) --memDelta;
        const int prevPeak = peakDelta;
        peakDelta = std::max(peakDelta, memDelta);
        const auto pass = passIndex(c);
        if (!pass || !available[*pass]) continue;
        available[*pass] = false;
        --left;
        if (isForward(c) && mem[i] + prevPeak >= peak) continue;
        const int cnt = count[i][*pass];
        if (cnt >= m) continue;
        bool canMove = true;
        auto before = [&](long slot) { return slot > -1 && slot < static_cast<long>(j); };
        if (c == 'F' || c == 'B') {
          if (i > 0) {
            canMove = before(index.at(cnt, i - 1, *pass));
          } else if (c == 'B') {
            canMove = count[i][1] > cnt;
          }
        } else if (c == 'f' || c == 'b') {
          if (i + 1 < p) {
            canMove = before(index.at(cnt, i + 1, *pass));
          } else {
            canMove = count[i][c == 'f' ? 0 : 2] > cnt;
          }
        } else {
          canMove = count[i][c == 'W' ? 2 : 3] > cnt;
        }
        if (!canMove) continue;
        row[j] = c;
        row[k] = ' ';
        if (!placed(i, c, j)) return false;
        break;
      }
    }
  }
  return true;
}

// relabel_w: W/w passes follow their B/b in order.
bool relabelW(Grid& g, int m) {
  for (auto& row : g) {
    std::array<int, kPattern> count{};
    for (char c : row) {
      if (const auto pass = passIndex(c)) ++count[*pass];
    }
    for (int c : count) {
      if (c != m) return false;
    }
    std::deque<char> queue;
    for (char& c : row) {
      if (c == 'B')
        queue.push_back('W');
      else if (c == 'b')
        queue.push_back('w');
      else if (isWeight(c)) {
        if (queue.empty()) return false;
        c = queue.front();
        queue.pop_front();
      }
    }
    if (!queue.empty()) return false;
  }
  return true;
}

// remove_redundancy.
void keepFirstM(Grid& g, int m) {
  for (auto& row : g) {
    std::array<int, kPattern> count{};
    for (char& c : row) {
      const auto pass = passIndex(c);
      if (!pass) continue;
      if (count[*pass] >= m) {
        c = ' ';
      } else {
        ++count[*pass];
      }
    }
  }
}

// check_correctness (including its leniency on the first and last device).
bool correct(const Grid& g, int m) {
  const std::size_t p = g.size();
  SlotIndex index(p, m);
  for (std::size_t i = 0; i < p; ++i) {
    std::array<int, kPattern> count{};
    const std::string& row = g[i];
    for (std::size_t j = 0; j < row.size(); ++j) {
      const auto pass = passIndex(row[j]);
      if (!pass) continue;
      int& cnt = count[*pass];
      if (cnt >= m) return false;
      index.at(cnt, i, *pass) = static_cast<long>(j);
      ++cnt;
    }
    for (int c : count) {
      if (c != m) return false;
    }
  }
  for (std::size_t i = 0; i < p; ++i) {
    for (int j = 0; j < m; ++j) {
      auto at = [&](std::size_t device, char c) { return index.at(j, device, *passIndex(c)); };
      if (at(i, 'B') >= at(i, 'W') || at(i, 'b') >= at(i, 'w')) return false;
      if (i == 0) {
        if (at(i, 'f') >= at(i, 'B')) return false;
      } else if (i == p - 1) {
        if (at(i, 'F') >= at(i, 'f') || at(i, 'B') >= at(i, 'b')) return false;
      } else {
        if (at(i - 1, 'F') >= at(i, 'F') || at(i - 1, 'B') >= at(i, 'B')) return false;
        if (at(i + 1, 'f') >= at(i, 'f') || at(i + 1, 'b') >= at(i, 'b')) return false;
      }
    }
  }
  return true;
}

// schedule_by_building_block: the grid, or nullopt; `peak` gets the peak the reference returns
// (which decides whether its search stops trying further splits).
std::optional<Grid> scheduleBlock(int p, int m, const std::vector<Pattern>& block, int maxMem, int& peak) {
  const int redundantM = std::max(m, 2 * p);
  Grid g = repeated(p, redundantM, block);
  keepMCopies(g, redundantM);
  int initPeak = peakMem(g);
  peak = initPeak;
  if ((m == redundantM && initPeak > maxMem) || initPeak > 2 * p) return std::nullopt;
  if (!squeeze(g, redundantM) || !reorderWarmUp(g, redundantM) || !squeeze(g, redundantM)) return std::nullopt;
  int now = peakMem(g);
  if (now > initPeak) return std::nullopt;
  if (m < redundantM) {
    keepFirstM(g, m);
    if (m <= p && 2 * m <= maxMem) releaseWInWarmUp(g, std::min(2 * p, now));
    if (!squeeze(g, m)) return std::nullopt;
    initPeak = now = peakMem(g);
    peak = now;
    if (now > maxMem) return std::nullopt;
  }
  if (!reorderCoolDown(g, m) || !reorderGreedily(g, m) || !relabelW(g, m)) return std::nullopt;
  now = peakMem(g);
  peak = now;
  if (now > initPeak) {
    peak = initPeak;
    return std::nullopt;
  }
  if (!correct(g, m)) return std::nullopt;
  return g;
}

std::vector<std::vector<OrderedOp>> toOrder(const Grid& g) {
  const int p = static_cast<int>(g.size());
  std::vector<std::vector<OrderedOp>> out(g.size());
  for (int i = 0; i < p; ++i) {
    const auto row = static_cast<std::size_t>(i);
    std::array<int, kPattern> count{};
    for (char c : g[row]) {
      const auto pass = passIndex(c);
      if (!pass) continue;
      OrderedOp o;
      // F, b, w: chunk 0 (stage i); f, B, W: chunk 1 (stage 2p−1−i).
      o.virtualStage = (c == 'F' || c == 'b' || c == 'w') ? i : 2 * p - 1 - i;
      o.kind = isForward(c) ? OpKind::F : isWeight(c) ? OpKind::W : OpKind::B;
      o.microbatch = count[*pass]++;
      out[row].push_back(o);
    }
  }
  return out;
}

}  // namespace

namespace {

// The reference's starting patterns: F at slot 0, f, B, b at distinct slots 1…5, W and w in
// the next free slots after B and b.
std::vector<Pattern> startingPatterns() {
  std::vector<Pattern> starts;
  for (int f1 = 1; f1 < kPattern; ++f1) {
    for (int b1 = 1; b1 < kPattern; ++b1) {
      for (int b0 = 1; b0 < kPattern; ++b0) {
        if (f1 == b1 || f1 == b0 || b1 == b0) continue;
        starts.push_back(fillW({0, f1, b1, b0, -1, -1}));
      }
    }
  }
  return starts;
}

}  // namespace

namespace {

// The search's result depends on its four numbers alone (not on costs): the configurator and
// the DiffusionPipe search ask for the same (p, m) many times, so finished results are kept.
// Least recently used first out, at most kCacheOps ops in all; a cancelled search's partial
// result is never kept.
constexpr std::size_t kCacheOps = std::size_t{1} << 22;  // 4M ops, 64 MB

using SearchKey = std::tuple<int, int, int, double>;

struct SearchCache {
  std::mutex mutex;
  std::list<std::pair<SearchKey, std::shared_ptr<const std::vector<VBlockCandidate>>>> entries;  // most recent first
  std::size_t ops = 0;
};

SearchCache& searchCache() {
  static SearchCache cache;
  return cache;
}

std::size_t opsOf(const std::vector<VBlockCandidate>& found) {
  std::size_t n = 0;
  for (const auto& c : found) {
    for (const auto& row : c.order) n += row.size();
  }
  return n;
}

std::vector<VBlockCandidate> searchBlocks(int devices, int microbatches, int maxMemUnits, double maxCells,
                                          const SolveControl* control);

}  // namespace

std::vector<VBlockCandidate> vBlockSearch(int devices, int microbatches, int maxMemUnits, double maxCells,
                                          const SolveControl* control) {
  const SearchKey key{devices, microbatches, maxMemUnits, maxCells};
  SearchCache& cache = searchCache();
  {
    std::lock_guard lock(cache.mutex);
    for (auto it = cache.entries.begin(); it != cache.entries.end(); ++it) {
      if (it->first != key) continue;
      cache.entries.splice(cache.entries.begin(), cache.entries, it);
      return *cache.entries.front().second;
    }
  }
  auto found = searchBlocks(devices, microbatches, maxMemUnits, maxCells, control);
  if (control && control->cancelled()) return found;
  const std::size_t ops = opsOf(found);
  if (ops > kCacheOps) return found;
  std::lock_guard lock(cache.mutex);
  for (const auto& e : cache.entries) {
    if (e.first == key) return found;  // another thread finished the same search first
  }
  cache.entries.emplace_front(key, std::make_shared<const std::vector<VBlockCandidate>>(found));
  cache.ops += ops;
  while (cache.ops > kCacheOps && !cache.entries.empty()) {
    cache.ops -= opsOf(*cache.entries.back().second);
    cache.entries.pop_back();
  }
  return found;
}

namespace {

std::vector<VBlockCandidate> searchBlocks(int devices, int microbatches, int maxMemUnits, double maxCells,
                                          const SolveControl* control) {
  std::vector<VBlockCandidate> out;
  const int p = devices;
  const int m = microbatches;
  if (p < 2 || m < 1) return out;
  // Each block repeats into a grid of p rows of 6 (4p + max(m, 2p) + 1) slots.
  const double cellsPerBlock = static_cast<double>(p) * kPattern * (4.0 * p + std::max(m, 2 * p) + 1);
  double cells = 0;
  const auto starts = startingPatterns();
  const int limit = std::min(2 * p, maxMemUnits);
  std::unordered_set<std::string> seen;  // grids already returned (many blocks squeeze to the same one)
  for (std::size_t s = 0; s < starts.size(); ++s) {
    if (control && control->cancelled()) return out;
    for (int k0 = 1; k0 <= 5; ++k0) {
      for (int k1 = 1; k1 <= k0; ++k1) {
        for (int len0 = 1; len0 < p; ++len0) {
          auto block = buildingBlock(starts[s], {k0, -1, k0, -1}, {k1, -1, k1, -1}, len0, p);
          if (!block) continue;
          cells += cellsPerBlock;
          if (cells > maxCells) return out;
          int peak = 0;
          auto grid = scheduleBlock(p, m, *block, limit, peak);
          if (peak > 2 * p || peak > maxMemUnits) break;
          if (!grid) continue;
          std::string flat;
          for (const auto& row : *grid) flat += row + '|';
          if (!seen.insert(std::move(flat)).second) continue;
          out.push_back({{static_cast<int>(s), k0, k1, len0}, peak, toOrder(*grid)});
        }
      }
    }
  }
  return out;
}

}  // namespace

std::optional<std::vector<std::vector<OrderedOp>>> vBlockBuild(int devices, int microbatches, int maxMemUnits,
                                                               const std::array<int, 4>& key) {
  const auto starts = startingPatterns();
  if (!inRange(starts, key[0])) return std::nullopt;
  auto block = buildingBlock(starts[static_cast<std::size_t>(key[0])], {key[1], -1, key[1], -1},
                             {key[2], -1, key[2], -1}, key[3], devices);
  if (!block) return std::nullopt;
  int peak = 0;
  auto grid = scheduleBlock(devices, microbatches, *block, std::min(2 * devices, maxMemUnits), peak);
  if (!grid || peak > maxMemUnits) return std::nullopt;
  return toOrder(*grid);
}

}  // namespace pipestudio::schedules
