#pragma once
/// \file One line where an error is passed up (after Perfetto's status_macros.h and Orbit's
/// OUTCOME_TRY): inside a function returning `Expected<U>` or `Status`,
///
///     PS_RETURN_IF_ERROR(writeHeader(out));              // a Status or an Expected<T>
///     PS_ASSIGN_OR_RETURN(const Json doc, loadJson(path));  // declares `doc` from the value
///     PS_ASSIGN_OR_RETURN(plan, makePlan(request));         // or assigns an existing variable
///
/// return the error of the expression unchanged (kind kept) when it has one. The expression is
/// evaluated once; ASSIGN moves the value out of its result.

#include <utility>

#include "pipestudio/common/Expected.hpp"

#define PS_TRY_CONCAT_INNER(a, b) a##b
#define PS_TRY_CONCAT(a, b) PS_TRY_CONCAT_INNER(a, b)

/// Returns the error of `expr` (a Status or an Expected) from the enclosing function.
#define PS_RETURN_IF_ERROR(expr)                        \
  do {                                                  \
    auto&& ps_try_result_ = (expr);                     \
    if (!ps_try_result_) return ps_try_result_.error(); \
  } while (false)

#define PS_ASSIGN_OR_RETURN_IMPL(result, lhs, expr) \
  auto result = (expr);                             \
  if (!result) return result.error();               \
  lhs = std::move(*result) /* NOLINT(bugprone-macro-parentheses) */

/// Declares or assigns `lhs` from the value of `expr` (an Expected), or returns its error.
#define PS_ASSIGN_OR_RETURN(lhs, expr) PS_ASSIGN_OR_RETURN_IMPL(PS_TRY_CONCAT(ps_try_, __LINE__), lhs, expr)
