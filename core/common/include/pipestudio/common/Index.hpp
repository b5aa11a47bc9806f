#pragma once
// Devices, virtual stages, microbatches and op indices are ints throughout (they are small,
// and -1 means "none"); standard containers index with std::size_t. The conversion between
// the two lives here, once, instead of a cast at every call site:
//  - inRange(container, i): whether an int indexes a container (the bounds check);
//  - IdVector<T>: a vector indexed by an int id (one value per device, per stage, ...);
//  - Grid<T>: a rows x cols table indexed by two int ids (per stage and microbatch, ...).
// Ids handed to IdVector and Grid are valid by the time they get there (plans and specs are
// validated when they are loaded or built); an out-of-range id is a bug, caught by assert in
// debug builds.
//
//   IdVector<double> busyMs(devices, 0.0);
//   busyMs[op.device] += op.durationMs;
//   Grid<double> forwardEndMs(stages, microbatches, 0.0);
//   forwardEndMs(op.virtualStage, op.microbatch) = endMs;

#include <cassert>
#include <concepts>
#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <type_traits>
#include <utility>
#include <vector>

namespace pipestudio {

/// Whether `i` indexes `container`: 0 <= i < size.
template <class Container, std::integral I>
constexpr bool inRange(const Container& container, I i) {
  if constexpr (std::is_signed_v<I>) {
    if (i < 0) return false;
  }
  return static_cast<std::size_t>(i) < std::size(container);
}

namespace detail {
/// The container index of a valid (non-negative) int id or count.
constexpr std::size_t toIndex(int i) {
  assert(i >= 0);
  return static_cast<std::size_t>(i);
}
}  // namespace detail

/// A std::vector indexed by an int id. Sizes are ints too, so loops over ids need no cast.
template <class T>
class IdVector {
 public:
  using value_type = T;
  using reference = typename std::vector<T>::reference;
  using const_reference = typename std::vector<T>::const_reference;
  using iterator = typename std::vector<T>::iterator;
  using const_iterator = typename std::vector<T>::const_iterator;

  IdVector() = default;
  explicit IdVector(int count, const T& value = T{}) : m_values(detail::toIndex(count), value) {}
  /// Sized like another container (one value per op of a plan, ...).
  explicit IdVector(std::size_t count, const T& value = T{}) : m_values(count, value) {}
  IdVector(std::initializer_list<T> values) : m_values(values) {}
  explicit IdVector(std::vector<T> values) : m_values(std::move(values)) {}

  reference operator[](int id) {
    assert(inRange(m_values, id));
    return m_values[detail::toIndex(id)];
  }
  const_reference operator[](int id) const {
    assert(inRange(m_values, id));
    return m_values[detail::toIndex(id)];
  }

  [[nodiscard]] int size() const { return static_cast<int>(m_values.size()); }
  [[nodiscard]] bool empty() const { return m_values.empty(); }
  [[nodiscard]] bool contains(int id) const { return inRange(m_values, id); }

  void assign(int count, const T& value) { m_values.assign(detail::toIndex(count), value); }
  void assign(std::size_t count, const T& value) { m_values.assign(count, value); }
  void resize(int count) { m_values.resize(detail::toIndex(count)); }
  void resize(std::size_t count) { m_values.resize(count); }
  void resize(int count, const T& value) { m_values.resize(detail::toIndex(count), value); }
  void reserve(int count) { m_values.reserve(detail::toIndex(count)); }
  void clear() { m_values.clear(); }
  // NOLINTBEGIN(readability-identifier-naming): std::vector's names, so an IdVector replaces
  // a vector without rewriting its uses.
  void push_back(const T& value) { m_values.push_back(value); }
  void push_back(T&& value) { m_values.push_back(std::move(value)); }
  template <class... Args>
  reference emplace_back(Args&&... args) {
    return m_values.emplace_back(std::forward<Args>(args)...);
  }
  // NOLINTEND(readability-identifier-naming)

  reference front() { return m_values.front(); }
  reference back() { return m_values.back(); }
  [[nodiscard]] const_reference front() const { return m_values.front(); }
  [[nodiscard]] const_reference back() const { return m_values.back(); }

  iterator begin() { return m_values.begin(); }
  iterator end() { return m_values.end(); }
  [[nodiscard]] const_iterator begin() const { return m_values.begin(); }
  [[nodiscard]] const_iterator end() const { return m_values.end(); }

  /// The underlying vector, for APIs that take one (its index i is id i).
  std::vector<T>& values() { return m_values; }
  [[nodiscard]] const std::vector<T>& values() const { return m_values; }

  friend bool operator==(const IdVector&, const IdVector&) = default;

 private:
  std::vector<T> m_values;
};

/// A rows x cols table stored row after row, indexed by two int ids: (virtual stage,
/// microbatch), (pipeline, device), ...
template <class T>
class Grid {
 public:
  using reference = typename std::vector<T>::reference;
  using const_reference = typename std::vector<T>::const_reference;

  Grid() = default;
  Grid(int rows, int cols, const T& value = T{}) { assign(rows, cols, value); }

  reference operator()(int row, int col) { return m_values[at(row, col)]; }
  const_reference operator()(int row, int col) const { return m_values[at(row, col)]; }

  [[nodiscard]] int rows() const { return m_rows; }
  [[nodiscard]] int cols() const { return m_cols; }
  [[nodiscard]] bool contains(int row, int col) const { return row >= 0 && row < m_rows && col >= 0 && col < m_cols; }

  void assign(int rows, int cols, const T& value) {
    m_rows = rows;
    m_cols = cols;
    m_values.assign(detail::toIndex(rows) * detail::toIndex(cols), value);
  }
  /// Sets every cell to `value`, keeping the shape.
  void fill(const T& value) { m_values.assign(m_values.size(), value); }

  /// The cells row after row, for whole-table passes.
  std::vector<T>& values() { return m_values; }
  [[nodiscard]] const std::vector<T>& values() const { return m_values; }

 private:
  [[nodiscard]] std::size_t at(int row, int col) const {
    assert(contains(row, col));
    return detail::toIndex(row) * detail::toIndex(m_cols) + detail::toIndex(col);
  }

  int m_rows = 0;
  int m_cols = 0;
  std::vector<T> m_values;
};

}  // namespace pipestudio
