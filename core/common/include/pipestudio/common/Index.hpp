#pragma once
// Devices, virtual stages, microbatches and op indices are ints throughout (they are small,
// and -1 means "none"); standard containers index with std::size_t. Bounds checks of an int
// against a container go through here instead of a cast at every call site.

#include <concepts>
#include <cstddef>
#include <iterator>
#include <type_traits>

namespace pipestudio {

/// Whether `i` indexes `container`: 0 <= i < size.
template <class Container, std::integral I>
constexpr bool inRange(const Container& container, I i) {
  if constexpr (std::is_signed_v<I>) {
    if (i < 0) return false;
  }
  return static_cast<std::size_t>(i) < std::size(container);
}

}  // namespace pipestudio
