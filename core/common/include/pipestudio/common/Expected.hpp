#pragma once
/// \file Result types used across module boundaries (no exceptions cross a module).

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace pipestudio {

/// What kind of failure an Error is. Callers branch on the kind, never on the message text.
enum class ErrorKind {
  Failure,    ///< the input or the environment: the message says where and what
  Cancelled,  ///< the caller asked to stop (SolveControl::cancel, a cancelled deployment)
};

/// A human-readable error: where (file, line, JSON pointer, host, rank), what, what was expected.
struct Error {
  std::string message;
  ErrorKind kind = ErrorKind::Failure;

  /// The error a cancelled operation returns (modelled on Orbit's CanceledOr).
  static Error cancelled() { return Error{"cancelled", ErrorKind::Cancelled}; }
  bool isCancelled() const { return kind == ErrorKind::Cancelled; }
  /// The same error (kind kept) with `prefix` in front of its message: "fill greedy: …".
  Error withPrefix(const std::string& prefix) const { return Error{prefix + message, kind}; }
};

/// A value or an Error. Modelled on Orbit's ErrorMessageOr<T>.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : m_v(std::in_place_index<0>, std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Expected(Error error) : m_v(std::in_place_index<1>, std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool hasValue() const { return m_v.index() == 0; }
  explicit operator bool() const { return hasValue(); }

  T& value() & {
    assert(hasValue());
    return std::get<0>(m_v);
  }
  const T& value() const& {
    assert(hasValue());
    return std::get<0>(m_v);
  }
  T&& value() && {
    assert(hasValue());
    return std::get<0>(std::move(m_v));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const {
    assert(!hasValue());
    return std::get<1>(m_v);
  }
  const std::string& message() const { return error().message; }
  /// An error, and of kind Cancelled.
  bool isCancelled() const { return !hasValue() && error().isCancelled(); }

 private:
  std::variant<T, Error> m_v;
};

/// Success or an Error, for operations with no value. Success is `Status{}` (or `return {};`);
/// there is deliberately no static `ok()`, which `st.ok()` would call on an instance and read
/// as a test of `st`.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : m_error(std::move(error)), m_ok(false) {}  // NOLINT(google-explicit-constructor)
  bool isOk() const { return m_ok; }
  explicit operator bool() const { return m_ok; }
  const std::string& message() const { return m_error.message; }
  const Error& error() const { return m_error; }
  /// An error, and of kind Cancelled.
  bool isCancelled() const { return !m_ok && m_error.isCancelled(); }

 private:
  Error m_error;
  bool m_ok = true;
};

}  // namespace pipestudio
