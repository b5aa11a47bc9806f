// Schedule CSV in the compute-only format of torch.distributed.pipelining
// (PipelineScheduleMulti._dump_csv / _load_csv, _Action.from_str): one CSV row per rank, each
// cell an action `<stage_index><type><microbatch_index>`; types F (forward), I (backward input),
// W (backward weight), B (full backward). Our virtual stage ids are PyTorch's stage indices (both
// count model chunks in pipeline order) and our devices are its ranks.
#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "TorchSchedule.hpp"
#include "pipestudio/common/Files.hpp"
#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/planner/Simulator.hpp"

namespace pipestudio {
namespace {

constexpr std::size_t kMaxCsvBytes = std::size_t{256} << 20;  // 256 MiB: far above 200k actions
constexpr std::size_t kMaxReportedErrors = 20;
constexpr int kMaxInferredStages = 1 << 16;

std::string torchAction(int stage, OpKind kind, int microbatch) {
  char type = 'F';
  switch (kind) {
    case OpKind::F:
      type = 'F';
      break;
    case OpKind::B:
      type = 'I';
      break;
    case OpKind::W:
      type = 'W';
      break;
    case OpKind::BW:
      type = 'B';
      break;
    default:
      break;
  }
  return std::to_string(stage) + type + std::to_string(microbatch);
}

std::string describe(OpKind kind) {
  switch (kind) {
    case OpKind::F:
      return "forward";
    case OpKind::B:
      return "input gradient";
    case OpKind::W:
      return "weight gradient";
    case OpKind::BW:
      return "fused backward";
    default:
      return std::string(opKindName(kind));
  }
}

struct Cell {
  std::string_view text;
  std::size_t column = 1;     // 1-based byte column of the cell's first character
  bool unterminated = false;  // a quoted cell whose closing quote is missing
};

// Splits one CSV line into cells. PyTorch's csv.writer never quotes actions, but a hand-edited
// file may (spreadsheets do): a quoted cell is unquoted, "" inside it is a quote.
std::vector<Cell> splitCells(std::string_view line, std::string& scratch, std::vector<std::string>& owned) {
  std::vector<Cell> cells;
  std::size_t i = 0;
  while (i <= line.size()) {
    const std::size_t start = i;
    std::size_t lead = i;
    while (lead < line.size() && (line[lead] == ' ' || line[lead] == '\t')) ++lead;
    if (lead < line.size() && line[lead] == '"') {
      scratch.clear();
      std::size_t j = lead + 1;
      while (j < line.size()) {
        if (line[j] == '"') {
          if (j + 1 < line.size() && line[j + 1] == '"') {
            scratch.push_back('"');
            j += 2;
            continue;
          }
          break;
        }
        scratch.push_back(line[j++]);
      }
      owned.push_back(scratch);
      const bool closed = j < line.size();
      std::size_t end = closed ? j + 1 : j;
      while (end < line.size() && line[end] != ',') ++end;
      cells.push_back({owned.back(), lead + 2, !closed});
      i = end + 1;
      if (end >= line.size()) break;
      continue;
    }
    std::size_t end = line.find(',', start);
    if (end == std::string_view::npos) end = line.size();
    cells.push_back({line.substr(start, end - start), start + 1});
    i = end + 1;
    if (end >= line.size()) break;
  }
  return cells;
}

std::string_view trim(std::string_view s, std::size_t& offset) {
  offset = 0;
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
    ++offset;
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

struct ParsedAction {
  int stage = 0;
  OpKind kind = OpKind::F;
  int microbatch = 0;
  /// SEND_F/RECV_F/SEND_B/RECV_B, UNSHARD/RESHARD/REDUCE_GRAD (the compute_comms format): no op
  /// of ours. Transfers follow from the data flow; FSDP's actions become Plan::fsdpActions.
  bool communication = false;
  std::optional<FsdpActionKind> fsdp;  ///< UNSHARD, RESHARD or REDUCE_GRAD
};

constexpr std::string_view kOverlapSuffix = ")OVERLAP_F_B";

const char* kDialects =
    "current dialect: F forward, I input gradient, W weight gradient, B full backward; legacy dialect "
    "(--csv-dialect legacy, PyTorch 2.5 and the Zero Bubble fork): F, B input gradient, W, BW full backward";

// `<digits><type><digits>`; returns an explanation on failure.
std::optional<std::string> parseAction(std::string_view s, CsvDialect dialect, ParsedAction& out) {
  std::size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  if (i == 0) {
    return dialect == CsvDialect::Legacy
               ? "expected an action such as 0F0, 1B3, 2W1 or 1BW0 (stage, type F/B/W/BW, microbatch)"
               : "expected an action such as 0F0, 1I3, 2W1 or 1B0 (stage, type F/I/W/B, microbatch)";
  }
  if (i > 9) return "stage index too large";
  std::from_chars(s.data(), s.data() + i, out.stage);
  std::size_t j = i;
  while (j < s.size() && !(s[j] >= '0' && s[j] <= '9')) ++j;
  const std::string_view type = s.substr(i, j - i);
  const bool legacy = dialect == CsvDialect::Legacy;
  if (type == "F") {
    out.kind = OpKind::F;
  } else if (type == "W") {
    out.kind = OpKind::W;
  } else if (legacy ? type == "B" : type == "I") {
    out.kind = OpKind::B;
  } else if (legacy ? type == "BW" : type == "B") {
    out.kind = OpKind::BW;
  } else if (type == "UNSHARD" || type == "RESHARD" || type == "REDUCE_GRAD") {
    // Per stage, no microbatch (_Action.from_str: `1UNSHARD`).
    if (j != s.size()) return "unexpected characters after '" + excerpt(type) + "' (it names a stage, no microbatch)";
    out.communication = true;
    out.fsdp = fsdpActionFromName(type);
    out.microbatch = -1;
    return std::nullopt;
  } else if (type == "SEND_F" || type == "RECV_F" || type == "SEND_B" || type == "RECV_B") {
    out.communication = true;
  } else if (type == "OVERLAP_F_B") {
    return "OVERLAP_F_B pairs two actions: write it as (0F7;7B3)OVERLAP_F_B";
  } else if (type == "BW" && !legacy) {
    return "unknown action type 'BW' (the file reads as the legacy dialect, where BW is the full backward and B "
           "the input gradient: pass --csv-dialect legacy; " +
           std::string(kDialects) + ")";
  } else {
    return "unknown action type '" + excerpt(type) + "' (" +
           (legacy ? "read as the legacy dialect" : "read as the current dialect") + "; " + kDialects + ")";
  }
  const std::string_view mb = s.substr(j);
  if (out.communication) {
    // PyTorch 2.5's lowering batched a send with the neighbour's receive in one cell,
    // `0SEND_F0_1RECV_B0` (SEND_F_RECV_B, SEND_B_RECV_F); its runtime.py has no such action.
    const std::size_t underscore = mb.find('_');
    if (underscore != std::string_view::npos && mb.find("RECV_", underscore) != std::string_view::npos) {
      return "a batched send and receive in one cell (PyTorch 2.5's SEND_F_RECV_B / SEND_B_RECV_F) is not taken "
             "(expected each in its own cell, as torch.distributed.pipelining writes them now: '" +
             excerpt(s.substr(0, j + underscore)) + "' then '" + excerpt(mb.substr(underscore + 1)) + "')";
    }
  }
  if (mb.empty()) return "missing microbatch index after '" + excerpt(type) + "'";
  if (mb.size() > 9) return "microbatch index too large";
  for (char c : mb) {
    if (c < '0' || c > '9') return "unexpected characters after the microbatch index";
  }
  std::from_chars(mb.data(), mb.data() + mb.size(), out.microbatch);
  return std::nullopt;
}

// A message from its parts, in one string (a chain of `+` makes a temporary per part).
std::string concat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view part : parts) out += part;
  return out;
}

// One cell of a row that the FSDP checks read: an FSDP action or a pass, in row order.
struct RowEvent {
  int stage = 0;
  std::optional<FsdpActionKind> fsdp;  ///< empty: a pass
  OpKind kind = OpKind::F;
  int microbatch = 0;
  std::size_t line = 0;
  std::size_t column = 0;
};

// The rules `_PipelineScheduleRuntime` applies to a row's UNSHARD / RESHARD / REDUCE_GRAD when its
// stages are FSDP modules (ZeRO-3), plus what makes gradients wrong without an error there: a
// stage without REDUCE_GRAD never reduces its gradients, one before its last backward reduces
// part of them. `endLine`/`endColumn` place problems found at the end of the row.
template <typename Fail>
void checkFsdpRow(const std::vector<RowEvent>& row, int microbatches, std::size_t endLine, std::size_t endColumn,
                  const Fail& fail) {
  enum class Params : std::uint8_t { Sharded, Gathering, Gathered };
  struct StageState {
    Params params = Params::Sharded;
    std::size_t unshardLine = 0, unshardColumn = 0;
    int backwards = 0;
    bool passes = false, reduced = false, reportedSharded = false;
    std::size_t reduceLine = 0;
  };
  std::map<int, StageState> stages;
  for (const RowEvent& e : row) {
    StageState& st = stages[e.stage];
    const std::string stage = "stage " + std::to_string(e.stage);
    if (!e.fsdp) {
      st.passes = true;
      if (st.params == Params::Sharded && !st.reportedSharded) {
        st.reportedSharded = true;
        fail(e.line, e.column,
             concat({"'", torchAction(e.stage, e.kind, e.microbatch), "' runs while the parameters of ", stage,
                     " are sharded: under ZeRO-3 PyTorch's runtime refuses it ('Attempted to compute on sharded') ",
                     "(expected an UNSHARD of ", stage, " before it, with no RESHARD between)"}));
      }
      if (st.params == Params::Gathering) st.params = Params::Gathered;
      if (e.kind == OpKind::W || e.kind == OpKind::BW) ++st.backwards;
      continue;
    }
    const std::string cell = "'" + std::to_string(e.stage) + std::string(fsdpActionName(*e.fsdp)) + "'";
    switch (*e.fsdp) {
      case FsdpActionKind::Unshard:
        if (st.params != Params::Sharded) {
          fail(e.line, e.column,
               concat({cell, ": ", stage, " is already unsharded (UNSHARD at line ", std::to_string(st.unshardLine),
                       ", column ", std::to_string(st.unshardColumn),
                       ", no RESHARD since); PyTorch's runtime refuses to unshard a stage twice"}));
        }
        st.params = Params::Gathering;
        st.unshardLine = e.line;
        st.unshardColumn = e.column;
        break;
      case FsdpActionKind::Reshard:
        if (st.params == Params::Sharded) {
          fail(e.line, e.column,
               concat({cell, ": ", stage,
                       " was not unsharded (PyTorch's runtime refuses to reshard it; expected an UNSHARD and a pass ",
                       "of the stage before)"}));
        } else if (st.params == Params::Gathering) {
          fail(e.line, e.column,
               concat({cell, ": no pass of ", stage, " since its UNSHARD at line ", std::to_string(st.unshardLine),
                       ", so the gather was never waited for (PyTorch's runtime refuses to reshard before the ",
                       "unshard finished; expected a pass between them)"}));
        }
        st.params = Params::Sharded;
        break;
      case FsdpActionKind::ReduceGrad:
        if (st.reduced) {
          fail(e.line, e.column,
               concat({cell, ": second REDUCE_GRAD of ", stage, " (first at line ", std::to_string(st.reduceLine),
                       "; expected one per iteration)"}));
        } else if (st.backwards < microbatches) {
          fail(e.line, e.column,
               concat({cell, ": after ", std::to_string(st.backwards), " of the ", std::to_string(microbatches),
                       " backward passes of ", stage,
                       ", it would reduce partial gradients (expected it after the stage's last W or B)"}));
        }
        st.reduced = true;
        st.reduceLine = e.line;
        break;
    }
  }
  for (const auto& [index, st] : stages) {
    const std::string stage = "stage " + std::to_string(index);
    if (st.params == Params::Gathering) {
      fail(st.unshardLine, st.unshardColumn,
           "'" + std::to_string(index) + "UNSHARD': no pass of " + stage +
               " uses it before the row ends (PyTorch's runtime refuses unused unshard operations)");
    } else if (st.params == Params::Gathered) {
      fail(endLine, endColumn,
           stage +
               " is still unsharded when the row ends: the next iteration's UNSHARD would unshard it twice "
               "(expected a RESHARD after its last pass)");
    }
    if (st.passes && !st.reduced) {
      fail(endLine, endColumn,
           stage +
               " has no REDUCE_GRAD: under ZeRO-3 its gradients would never be reduce-scattered over the "
               "data-parallel ranks (expected " +
               std::to_string(index) + "REDUCE_GRAD after its last W or B)");
    }
  }
}

// One schedule CSV read into a skeleton, collecting every problem of the file (up to
// kMaxReportedErrors) with its line and column. The phases of parseScheduleCsv: readRows, the
// checks of the whole file (rows, completeness, FSDP actions), then skeletonOf.
struct CsvReader {
  struct Seen {
    std::size_t line = 0;
    std::size_t column = 0;
  };

  CsvReader(std::string_view csv, const CsvScheduleShape& scheduleShape, const std::string& sourceName)
      : text(csv),
        shape(scheduleShape),
        source(sourceName),
        inferPlacement(scheduleShape.virtualStages.empty()),
        stageLimit(inferPlacement ? kMaxInferredStages : static_cast<int>(scheduleShape.virtualStages.size())),
        rowLine(scheduleShape.devices, 0),
        rowEnd(scheduleShape.devices, 1),
        lanes(scheduleShape.devices),
        events(scheduleShape.devices) {
    if (!inferPlacement) {
      for (const VirtualStage& vs : shape.virtualStages) stageDevice.push_back(vs.device);
    }
  }

  void fail(std::size_t line, std::size_t column, const std::string& what) {
    if (errors.size() >= kMaxReportedErrors) {
      truncated = true;
      return;
    }
    errors.push_back(source + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + what);
  }

  Grid<Seen>& seenOf(int stage) {
    if (seen.size() <= stage) seen.resize(stage + 1);
    auto& s = seen[stage];
    if (s.rows() == 0) s.assign(kOpKindCount, shape.microbatches, Seen{});
    return s;
  }

  // Reads every row; stops at the first action after the tables would pass the plan limit.
  void readRows() {
    std::size_t pos = 0;
    std::string scratch;
    std::vector<std::string> owned;
    while (pos < text.size()) {
      std::size_t eol = text.find('\n', pos);
      if (eol == std::string_view::npos) eol = text.size();
      std::string_view line = text.substr(pos, eol - pos);
      pos = eol + 1;
      ++lineNo;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      // Trailing blank lines are harmless; rows of actions for devices that do not exist are not.
      if (line.find_first_not_of(" \t,") != std::string_view::npos) rows = row + 1;
      if (row >= shape.devices) {
        ++row;
        continue;
      }
      rowLine[row] = lineNo;
      rowEnd[row] = line.size() + 1;
      owned.clear();
      for (const Cell& cell : splitCells(line, scratch, owned)) {
        if (!readCell(cell)) return;
      }
      ++row;
    }
  }

  // One cell of the current row; false once reading stops (tooLarge).
  bool readCell(const Cell& cell) {
    std::size_t lead = 0;
    const std::string_view action = trim(cell.text, lead);
    if (action.empty() || action == "None") return true;  // an idle step
    const std::size_t column = cell.column + lead;
    ++actions;
    if (tooLarge) return false;
    // What is wrong with the file, before what is wrong with the action the cell seems to be.
    if (cell.unterminated) {
      fail(lineNo, column - 1, "a quoted cell has no closing quote (the quote runs to the end of the line)");
      return true;
    }
    if (action.front() == '(') {
      readOverlapped(action, column);
      return true;
    }
    if (const auto other = action.find_first_of(";\t"); other != std::string_view::npos) {
      const char sep = action[other];
      fail(lineNo, column + other,
           std::string("'") + (sep == '\t' ? "\\t" : std::string(1, sep)) + "' inside '" + excerpt(action) +
               "': cells are separated by commas (expected a comma-separated CSV, one action per cell, as "
               "torch.distributed.pipelining writes it)");
      return true;
    }
    ParsedAction a;
    if (auto why = parseAction(action, shape.dialect, a)) {
      fail(lineNo, column, "'" + excerpt(action) + "': " + *why);
      return true;
    }
    place(a, action, lineNo, column, row);
    return true;
  }

  // `(0F7;7B3)OVERLAP_F_B`: a forward and a backward PyTorch runs overlapped (DualPipeV); here
  // the two ops back to back, paired by PlanConfig::overlapForwardBackward.
  void readOverlapped(std::string_view action, std::size_t column) {
    const std::size_t close = action.find(')');
    if (close == std::string_view::npos || action.substr(close) != kOverlapSuffix) {
      fail(lineNo, column, "'" + excerpt(action) + "': expected an overlapped pair such as (0F7;7B3)OVERLAP_F_B");
      return;
    }
    const std::string_view inner = action.substr(1, close - 1);
    const std::size_t semicolon = inner.find(';');
    if (semicolon == std::string_view::npos || inner.find(';', semicolon + 1) != std::string_view::npos) {
      fail(lineNo, column, "'" + excerpt(action) + "': OVERLAP_F_B pairs exactly two actions (a;b)");
      return;
    }
    std::size_t ignored = 0;
    const std::array<std::string_view, 2> members{trim(inner.substr(0, semicolon), ignored),
                                                  trim(inner.substr(semicolon + 1), ignored)};
    std::array<ParsedAction, 2> parsed;
    bool ok = true;
    for (std::size_t k = 0; k < 2 && ok; ++k) {
      if (auto why = parseAction(members[k], shape.dialect, parsed[k])) {
        fail(lineNo, column, "'" + excerpt(action) + "': '" + excerpt(members[k]) + "': " + *why);
        ok = false;
      } else if (parsed[k].communication) {
        fail(
            lineNo, column,
            "'" + excerpt(action) + "': '" + excerpt(members[k]) + "' is not a compute action (expected F, I, W or B)");
        ok = false;
      }
    }
    if (ok && (parsed[0].kind != OpKind::F || parsed[1].kind == OpKind::F)) {
      fail(lineNo, column,
           "'" + excerpt(action) + "': expected a forward then a backward (F;B or F;I), as DualPipeV writes them");
      ok = false;
    }
    if (!ok) return;
    for (const ParsedAction& a : parsed) place(a, action, lineNo, column, row);
  }

  // Checks one parsed action of row `row` and appends its op to the row's lane.
  void place(const ParsedAction& a, std::string_view action, std::size_t line, std::size_t column, int device) {
    if (a.stage >= stageLimit) {
      fail(line, column,
           "'" + excerpt(action) + "': stage " + std::to_string(a.stage) + " does not exist (expected 0.." +
               std::to_string(stageLimit - 1) + ")");
      return;
    }
    if (a.microbatch >= shape.microbatches) {
      fail(line, column,
           "'" + excerpt(action) + "': microbatch " + std::to_string(a.microbatch) + " out of range (expected 0.." +
               std::to_string(shape.microbatches - 1) + ")");
      return;
    }
    if (stageDevice.size() <= a.stage) stageDevice.resize(a.stage + 1, -1);
    if (static_cast<int>(a.stage) > highest.stage) highest = {static_cast<int>(a.stage), line, column, excerpt(action)};
    int& placed = stageDevice[a.stage];
    if (placed < 0) placed = device;
    if (placed != device) {
      fail(line, column,
           "'" + excerpt(action) + "': stage " + std::to_string(a.stage) + " is placed on device " +
               std::to_string(placed) + ", not on device " + std::to_string(device) + " (this row)");
      return;
    }
    if (a.fsdp) {
      skeleton.fsdpActions.push_back({device, a.stage, *a.fsdp, static_cast<std::int32_t>(lanes[device].size())});
      events[device].push_back({a.stage, a.fsdp, OpKind::F, 0, line, column});
      return;
    }
    if (a.communication) {  // transfers follow from the plan's data flow
      transferCells = true;
      return;
    }
    if ((seen.size() <= a.stage || seen[a.stage].rows() == 0) && !newTableFits(action, line, column)) return;
    Seen& seenAt = seenOf(a.stage)(static_cast<int>(a.kind), a.microbatch);
    if (seenAt.line != 0) {
      fail(line, column,
           "'" + excerpt(action) + "': duplicated op (first at line " + std::to_string(seenAt.line) + ", column " +
               std::to_string(seenAt.column) + ")");
      return;
    }
    seenAt = {line, column};
    lanes[device].push_back({a.stage, a.kind, a.microbatch, 0});
    events[device].push_back({a.stage, std::nullopt, a.kind, a.microbatch, line, column});
  }

  // A new stage's table: up to F, B and W per virtual stage and microbatch. Refused before the
  // tables pass the plan limit (a 6 KB row of 1000 stages × 300000 microbatches).
  bool newTableFits(std::string_view action, std::size_t line, std::size_t column) {
    const double ops = 3.0 * static_cast<double>(++tables) * shape.microbatches;
    if (ops <= static_cast<double>(kMaxPlanOps)) return true;
    std::array<char, 32> count{};
    std::snprintf(count.data(), count.size(), "%.3g", ops);
    if (!tooLarge) {
      tooLarge = Error{source + ":" + std::to_string(line) + ":" + std::to_string(column) + ": '" + excerpt(action) +
                       "': " + std::to_string(tables) + " virtual stages × " + std::to_string(shape.microbatches) +
                       " microbatches would make up to " + count.data() +
                       " ops (F, B and W per virtual stage and microbatch), more than the limit of " +
                       std::to_string(kMaxPlanOps) + " ops per plan (expected fewer stages or microbatches)"};
    }
    return false;
  }

  // Completeness of one stage: every microbatch has F and either B (fused) or I and W. PyTorch
  // lets one stage mix the two forms (DualPipeV runs most backwards fused and the last ones
  // split), so the choice is per microbatch.
  void checkStage(int stage, int stages) {
    const int device = stageDevice[stage];
    if (device < 0 || device >= shape.devices) {
      fail(lineNo + 1, 1,
           "stage " + std::to_string(stage) +
               " never appears (expected its actions on one row; stages are numbered "
               "0.." +
               std::to_string(stages - 1) + ")");
      return;
    }
    const auto& s = seenOf(stage);
    const auto has = [&](OpKind k, int mb) { return s(static_cast<int>(k), mb).line != 0; };
    const std::size_t line = rowLine[device] ? rowLine[device] : lineNo + 1;
    const std::size_t column = rowEnd[device];
    bool fusedSeen = false, weightWithoutInput = false;
    for (int mb = 0; mb < shape.microbatches; ++mb) {
      fusedSeen = fusedSeen || has(OpKind::BW, mb);
      weightWithoutInput = weightWithoutInput || (has(OpKind::W, mb) && !has(OpKind::B, mb));
    }
    // A legacy file (B input gradient, BW full backward) read as current has W with B and no I.
    const std::string legacyHint =
        shape.dialect == CsvDialect::Current && fusedSeen && weightWithoutInput
            ? "; the file reads as the legacy dialect (B input gradient, BW full backward): pass --csv-dialect legacy"
            : "";
    const auto missing = [&](OpKind k, int mb) {
      fail(line, column,
           "missing op " + torchAction(stage, k, mb) + " (" + describe(k) + " of microbatch " + std::to_string(mb) +
               " on stage " + std::to_string(stage) + ", device " + std::to_string(device) + ")" + legacyHint);
    };
    for (int mb = 0; mb < shape.microbatches; ++mb) {
      if (!has(OpKind::F, mb)) missing(OpKind::F, mb);
      const bool fused = has(OpKind::BW, mb);
      const bool split = has(OpKind::B, mb) || has(OpKind::W, mb);
      if (fused && split) {
        fail(line, column,
             "stage " + std::to_string(stage) + ", microbatch " + std::to_string(mb) +
                 " has both a full backward (B) and a split one (I/W) (expected one of them)" + legacyHint);
      } else if (!fused) {
        if (!has(OpKind::B, mb)) missing(OpKind::B, mb);
        if (!has(OpKind::W, mb)) missing(OpKind::W, mb);
      }
    }
  }

  // Stage numbers the rows skip (a cell edited to stage 99 of a four-stage schedule) are one
  // problem, reported at the highest stage named, instead of every op the skipped stages lack.
  bool reportStageGaps(int stages) {
    if (!inferPlacement) return false;
    int first = -1;
    int last = -1;
    int missing = 0;
    for (int stage = 0; stage < stages; ++stage) {
      if (stageDevice[stage] >= 0) continue;
      if (first < 0) first = stage;
      last = stage;
      ++missing;
    }
    if (first < 0) return false;
    fail(highest.line, highest.column,
         "'" + highest.action + "': stage " + std::to_string(highest.stage) + " is named, but stage" +
             (first == last ? " " + std::to_string(first) + " never appears"
                            : "s " + std::to_string(first) + ".." + std::to_string(last) + " never appear") +
             " (expected stages numbered 0.." + std::to_string(stages - 1 - missing) + " with none skipped: is stage " +
             std::to_string(highest.stage) + " a typo?)");
    return true;
  }

  Expected<ScheduleSkeleton> run() {
    readRows();
    if (tooLarge) return std::move(*tooLarge);
    if (actions == 0) {
      return Error{source + ": " +
                   (text.find_first_not_of(" \t\r\n,") == std::string_view::npos
                        ? std::string("has no actions (the file is empty or blank")
                        : std::string("has no actions (every cell is empty or None")) +
                   "; expected one row of actions such as 0F0,0I0,0W0 per device)"};
    }
    // One row per device, as PyTorch's _validate_schedule requires ("incorrect number of ranks"):
    // a row in the middle may be empty (a device without work), but no row may be missing or
    // extra. Trailing blank lines are not rows.
    if (rows != shape.devices) {
      fail(lineNo, 1,
           "the schedule has " + std::to_string(rows) + " rank row(s) but the plan has " +
               std::to_string(shape.devices) + " devices (--devices " + std::to_string(shape.devices) +
               "; expected one row per device)");
    }
    const int stages = stageDevice.size();
    if (!reportStageGaps(stages)) {
      for (int stage = 0; stage < stages; ++stage) checkStage(stage, stages);
    }
    // A compute_comms file runs as written (no lowering adds UNSHARD/RESHARD): under ZeRO-3 its
    // FSDP actions must be ones PyTorch's runtime accepts. A compute_only file gets PyTorch's own.
    if (errors.empty() && shape.fsdp && (transferCells || !skeleton.fsdpActions.empty())) {
      const auto report = [this](std::size_t line, std::size_t column, const std::string& what) {
        fail(line, column, what);
      };
      for (int r = 0; r < shape.devices; ++r) {
        checkFsdpRow(events[r], shape.microbatches, rowLine[r] ? rowLine[r] : lineNo + 1, rowEnd[r], report);
      }
    }
    if (!errors.empty()) {
      std::string message;
      for (const std::string& e : errors) message += (message.empty() ? "" : "\n") + e;
      if (truncated) message += "\n(further problems not shown)";
      return Error{message};
    }
    return skeletonOf(stages);
  }

  ScheduleSkeleton skeletonOf(int stages) {
    if (inferPlacement) {
      IdVector<int> chunks(shape.devices, 0);
      for (int stage = 0; stage < stages; ++stage) {
        VirtualStage vs;
        vs.id = stage;
        vs.device = stageDevice[stage];
        vs.chunk = chunks[vs.device]++;
        skeleton.virtualStages.push_back(vs);
      }
    } else {
      skeleton.virtualStages = shape.virtualStages;
    }
    skeleton.devices = std::move(lanes.values());
    return std::move(skeleton);
  }

  const std::string_view text;
  const CsvScheduleShape& shape;
  const std::string& source;
  std::vector<std::string> errors;
  bool truncated = false;
  const bool inferPlacement;
  const int stageLimit;
  IdVector<int> stageDevice;  // stage → device (given, or the first row naming it)
  // seen[stage](kind, mb): where each op is; allocated lazily per stage (hostile stage indices
  // cost nothing).
  IdVector<Grid<Seen>> seen;
  // Per device (row): its line and the column after its last cell.
  IdVector<std::size_t> rowLine;
  IdVector<std::size_t> rowEnd;
  ScheduleSkeleton skeleton;
  IdVector<std::vector<OrderedOp>> lanes;
  IdVector<std::vector<RowEvent>> events;
  bool transferCells = false;     // SEND_F/RECV_F/SEND_B/RECV_B: the file is in the compute_comms format
  int tables = 0;                 // stages with a table in `seen`
  std::optional<Error> tooLarge;  // the tables would pass the plan limit: parsing stops
  std::size_t lineNo = 0;
  std::size_t actions = 0;  // non-empty cells
  int row = 0;
  int rows = 0;  // rows up to the last one with actions
  struct Named {
    int stage = -1;
    std::size_t line = 0, column = 0;
    std::string action;
  } highest;  // where the highest stage number is first named
};

}  // namespace

std::optional<CsvFormat> csvFormatFromName(std::string_view name) {
  if (name == "compute_only") return CsvFormat::ComputeOnly;
  if (name == "compute_comms") return CsvFormat::ComputeComms;
  return std::nullopt;
}

std::optional<CsvDialect> csvDialectFromName(std::string_view name) {
  if (name == "current") return CsvDialect::Current;
  if (name == "legacy") return CsvDialect::Legacy;
  return std::nullopt;
}

Status validateTorchSchedule(const Plan& plan) {
  PS_ASSIGN_OR_RETURN(auto order, torchpp::computeOrder(plan));
  if (auto st = torchpp::validate(order, plan.config.devices, static_cast<int>(plan.virtualStages.size()),
                                  plan.config.microbatches);
      !st) {
    return Error{"torch.distributed.pipelining would refuse this order: " + st.message()};
  }
  return {};
}

Expected<std::string> scheduleCsv(const Plan& plan, CsvFormat format) {
  PS_ASSIGN_OR_RETURN(auto order, torchpp::computeOrder(plan));
  const int stages = static_cast<int>(plan.virtualStages.size());
  if (auto st = torchpp::validate(order, plan.config.devices, stages, plan.config.microbatches); !st) {
    return Error{"torch.distributed.pipelining would refuse this order: " + st.message()};
  }
  if (format == CsvFormat::ComputeOnly) return torchpp::csvText(order);
  IdVector<int> stageDevice(stages, -1);
  for (const VirtualStage& vs : plan.virtualStages) {
    if (stageDevice.contains(vs.id)) stageDevice[vs.id] = vs.device;
  }
  // A plan that came with its own FSDP actions (an imported compute_comms file) keeps them: its
  // costs follow their windows. Others get those of PyTorch's runtime lowering.
  const bool ownFsdp = !plan.fsdpActions.empty();
  if (ownFsdp) {
    PS_ASSIGN_OR_RETURN(order, torchpp::computeOrderWithFsdp(plan));
  }
  PS_ASSIGN_OR_RETURN(auto lowered, torchpp::lowerWithComms(
                                        order, [&](int s) { return stageDevice.contains(s) ? stageDevice[s] : -1; },
                                        stages, plan.config.microbatches, !ownFsdp));
  return torchpp::csvText(lowered);
}

Status writeScheduleCsv(const std::string& path, const Plan& plan, CsvFormat format) {
  auto text = scheduleCsv(plan, format);
  if (!text) return Error{path + ": " + text.message()};
  return writeOutputFile(path, *text);
}

Expected<ScheduleSkeleton> parseScheduleCsv(std::string_view text, const CsvScheduleShape& shape,
                                            const std::string& source) {
  // UTF-16/32 is named as such; a UTF-8 byte order mark (spreadsheets write one) is skipped.
  std::string head(text.substr(0, 4));
  PS_RETURN_IF_ERROR(requireUtf8(head, source));
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  if (shape.devices <= 0) return Error{source + ": the plan has no devices"};
  if (shape.microbatches <= 0) return Error{source + ": the plan has no microbatches"};
  CsvReader reader(text, shape, source);
  return reader.run();
}

Expected<std::string> convertScheduleCsv(std::string_view text, CsvDialect from, CsvDialect to,
                                         const std::string& source) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  std::string scratch;
  std::vector<std::string> owned;
  std::size_t pos = 0, lineNo = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    const bool lastLine = eol == std::string_view::npos;
    if (lastLine) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++lineNo;
    const bool cr = !line.empty() && line.back() == '\r';
    if (cr) line.remove_suffix(1);
    owned.clear();
    bool first = true;
    for (const Cell& cell : splitCells(line, scratch, owned)) {
      if (!first) out += ',';
      first = false;
      std::size_t lead = 0;
      const std::string_view action = trim(cell.text, lead);
      if (action.empty() || action == "None") continue;
      ParsedAction a;
      if (auto why = parseAction(action, from, a)) {
        return Error{source + ":" + std::to_string(lineNo) + ":" + std::to_string(cell.column + lead) + ": '" +
                     excerpt(action) + "': " + *why};
      }
      if (a.communication) {
        out += action;  // SEND_F, UNSHARD, … are spelled alike in both dialects
        continue;
      }
      std::string type;
      switch (a.kind) {
        case OpKind::F:
          type = "F";
          break;
        case OpKind::W:
          type = "W";
          break;
        case OpKind::B:
          type = to == CsvDialect::Legacy ? "B" : "I";
          break;
        default:
          type = to == CsvDialect::Legacy ? "BW" : "B";
          break;
      }
      out += std::to_string(a.stage) + type + std::to_string(a.microbatch);
    }
    if (!lastLine) out += cr ? "\r\n" : "\n";
  }
  return out;
}

bool csvHasOverlappedPairs(std::string_view text) { return text.find(kOverlapSuffix) != std::string_view::npos; }

bool csvHasFsdpActions(std::string_view text) {
  return text.find("UNSHARD") != std::string_view::npos || text.find("RESHARD") != std::string_view::npos ||
         text.find("REDUCE_GRAD") != std::string_view::npos;
}

Expected<ScheduleSkeleton> loadScheduleCsv(const std::string& path, const CsvScheduleShape& shape) {
  PS_ASSIGN_OR_RETURN(auto text, readRegularFile(path, kMaxCsvBytes));
  return parseScheduleCsv(text, shape, path);
}

Expected<Plan> importScheduleCsv(const Plan& base, std::string_view text, const std::string& source,
                                 CsvDialect dialect) {
  CsvScheduleShape shape;
  shape.dialect = dialect;
  shape.devices = base.config.devices;
  shape.microbatches = base.config.microbatches;
  shape.virtualStages = base.virtualStages;
  shape.fsdp = base.config.parallel.zeroStage >= 3;
  if (shape.virtualStages.empty()) return Error{source + ": the plan has no virtual stages to place the CSV on"};
  PS_ASSIGN_OR_RETURN(auto skeleton, parseScheduleCsv(text, shape, source));
  PlanRequest request{base.model, base.cluster, base.config};
  request.config.schedule = "custom";
  // OVERLAP_F_B pairs run overlapped only where the plan overlaps F and B (DualPipe); otherwise
  // one after the other, as PyTorch's runtime runs them.
  request.config.overlapForwardBackward = base.config.overlapForwardBackward && csvHasOverlappedPairs(text);
  auto plan = simulate(request, skeleton);
  if (!plan) return Error{source + ": " + plan.message()};
  return plan;
}

}  // namespace pipestudio
