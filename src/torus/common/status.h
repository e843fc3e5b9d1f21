// Status helpers shared by every torus library.
//
// Debian's Abseil has no RETURN_IF_ERROR / ASSIGN_OR_RETURN; these two macros are the project's own.
#pragma once

#include <cerrno>
#include <cstring>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#define TORUS_CONCAT_INNER_(a, b) a##b
#define TORUS_CONCAT_(a, b) TORUS_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function when `expr` is not OK.
#define TORUS_RETURN_IF_ERROR(expr)              \
  do {                                           \
    ::absl::Status torus_status_ = (expr);       \
    if (!torus_status_.ok()) return torus_status_; \
  } while (0)

// `lhs = value of expr` when expr (a StatusOr) is OK, else returns its status.
// Expands to several statements: use it inside braces, never as the body of an unbraced `if`.
#define TORUS_ASSIGN_OR_RETURN(lhs, expr)                                   \
  TORUS_ASSIGN_OR_RETURN_IMPL_(TORUS_CONCAT_(torus_statusor_, __LINE__), lhs, expr)
#define TORUS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

namespace torus {

// Internal: "<what> <path>: <strerror(errno)>", for a system call that just failed on `path`.
inline absl::Status ErrnoError(std::string_view what, std::string_view path) {
  return absl::InternalError(absl::StrCat(absl::string_view(what.data(), what.size()), " ",
                                          absl::string_view(path.data(), path.size()), ": ", std::strerror(errno)));
}

// `status` with `prefix` before its message, keeping its code; OK stays OK.
inline absl::Status PrefixStatus(std::string_view prefix, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(absl::string_view(prefix.data(), prefix.size()), status.message()));
}

}  // namespace torus
