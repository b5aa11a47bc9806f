#pragma once
// CUPTI time → the lanes' clock (Cupti.cpp). Kept free of CUDA so that tests/executor runs it
// without a GPU.
//
// Op ranges are CUDA events placed on the host steady clock through each iteration's reference
// event. CUPTI turns the GPU's timestamps into CPU time by its own interpolation, and on an H200
// (tests/gpu/run.sh, 2026-11-27) that interpolation sat 3.5–3.8 ms from the events and moved by
// about 0.5 ms between one delivery and the next, while durations agreed to 0.1 %. So a lane
// launches an empty marker kernel right before each event it places (the iteration's reference,
// every op's begin, the optimizer step's begin), and a record takes the offset of the latest
// marker before it on its own stream: kernels land inside the op that launched them, whatever
// CUPTI's conversion did in between.
//
// The n-th marker record of a stream pairs with the n-th `expect` of that stream (both are in
// launch order). A record whose preceding marker is not paired yet waits (offsetFor is empty):
// a lane states an iteration's event times only once the iteration has ended.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <iterator>
#include <map>
#include <optional>

namespace pipestudio::exec::cuda {

class ClockAnchors {
 public:
  /// A marker whose offset is further than this from the one before is a mismatch (a marker
  /// record CUPTI dropped shifts the pairing), not drift: it keeps the previous offset.
  static constexpr std::int64_t kMaxJumpNs = 100'000'000;
  /// Markers kept per stream once paired (the oldest go first).
  static constexpr std::size_t kKept = 4096;

  /// The offset (host ns − CUPTI ns) where no marker applies, e.g. from cuptiGetTimestamp.
  void setInitialOffset(std::int64_t offsetNs) { m_initial = offsetNs; }

  /// The next marker launched on `stream` ended just before the event at host time `hostNs`.
  void expect(std::uint32_t stream, std::int64_t hostNs) {
    Stream& s = m_streams[stream];
    if (s.firstUnpaired < s.markers.size()) {
      pair(s, s.firstUnpaired++, hostNs);
    } else {
      s.hosts.push_back(hostNs);
    }
    prune(s);
  }

  /// The next marker record of `stream` arrived, ending at CUPTI time `cuptiEndNs`.
  void marker(std::uint32_t stream, std::uint64_t cuptiEndNs) {
    Stream& s = m_streams[stream];
    s.markers.push_back({cuptiEndNs, false, 0});
    if (!s.hosts.empty() && s.firstUnpaired == s.markers.size() - 1) {
      pair(s, s.firstUnpaired++, s.hosts.front());
      s.hosts.pop_front();
    }
    prune(s);
  }

  /// The offset for a record of `stream` starting at CUPTI time `cuptiNs`; empty while the
  /// marker before it on that stream waits for its event time. A stream without markers (or a
  /// record before its first) takes the latest paired marker of any stream before it.
  std::optional<std::int64_t> offsetFor(std::uint32_t stream, std::uint64_t cuptiNs) const {
    auto it = m_streams.find(stream);
    if (it == m_streams.end()) return fallback(cuptiNs);
    const auto& markers = it->second.markers;
    // Markers at or before cuptiNs (a stream's markers are in time order).
    const auto n =
        static_cast<std::size_t>(std::upper_bound(markers.begin(), markers.end(), cuptiNs,
                                                  [](std::uint64_t t, const Marker& m) { return t < m.cuptiEndNs; }) -
                                 markers.begin());
    if (n == 0) return fallback(cuptiNs);
    if (!markers[n - 1].paired) return std::nullopt;
    return markers[n - 1].offsetNs;
  }

  /// The offset to use when waiting is over (the end of the run): the latest paired marker of
  /// any stream before `cuptiNs`, else the initial offset.
  std::int64_t fallback(std::uint64_t cuptiNs) const {
    auto it = m_paired.upper_bound(cuptiNs);
    return it == m_paired.begin() ? m_initial : std::prev(it)->second;
  }

 private:
  struct Marker {
    std::uint64_t cuptiEndNs = 0;
    bool paired = false;
    std::int64_t offsetNs = 0;
  };
  struct Stream {
    std::deque<Marker> markers;      ///< in launch order
    std::size_t firstUnpaired = 0;   ///< index of the first marker without its event time
    std::deque<std::int64_t> hosts;  ///< event times whose markers have not arrived yet
    std::optional<std::int64_t> last;
  };

  void pair(Stream& s, std::size_t i, std::int64_t hostNs) {
    Marker& m = s.markers[i];
    const std::int64_t offset = hostNs - static_cast<std::int64_t>(m.cuptiEndNs);
    const std::int64_t previous = s.last.value_or(m_initial);
    m.offsetNs = std::llabs(offset - previous) <= kMaxJumpNs ? offset : previous;
    m.paired = true;
    s.last = m.offsetNs;
    m_paired[m.cuptiEndNs] = m.offsetNs;
    if (m_paired.size() > kKept) m_paired.erase(m_paired.begin());
  }

  static void prune(Stream& s) {
    while (s.markers.size() > kKept && s.firstUnpaired > 0) {
      s.markers.pop_front();
      --s.firstUnpaired;
    }
  }

  std::int64_t m_initial = 0;
  std::map<std::uint32_t, Stream> m_streams;
  std::map<std::uint64_t, std::int64_t> m_paired;  ///< every stream's paired markers: CUPTI end → offset
};

}  // namespace pipestudio::exec::cuda
