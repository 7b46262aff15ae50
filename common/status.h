// Status helpers shared by every Aqueduct library.
//
// Debian's abseil (20220623) has no status macros, so this header supplies
// RETURN_IF_ERROR / ASSIGN_OR_RETURN and the conversions at the edges
// (gRPC <-> absl lives in common/grpc_status.h so that pure libraries do not
// depend on gRPC). Thread-safe: everything here is stateless.
#ifndef AQUEDUCT_COMMON_STATUS_H_
#define AQUEDUCT_COMMON_STATUS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define AQ_STATUS_CONCAT_INNER_(a, b) a##b
#define AQ_STATUS_CONCAT_(a, b) AQ_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function
// if it is not OK.
#define RETURN_IF_ERROR(expr)                \
  do {                                       \
    ::absl::Status aq_status_ = (expr);      \
    if (!aq_status_.ok()) return aq_status_; \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (an absl::StatusOr<T>);
// returns its status if not OK, else moves the value into `lhs`, which may be
// a declaration (`auto x`) or an existing variable.
#define ASSIGN_OR_RETURN(lhs, expr)                                         \
  AQ_ASSIGN_OR_RETURN_IMPL_(AQ_STATUS_CONCAT_(aq_statusor_, __LINE__), lhs, \
                            expr)

#define AQ_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr)     \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

namespace aqueduct {

// Returns `status` with `context` prepended to its message ("context: msg"),
// keeping the code. OK stays OK.
inline absl::Status Annotate(const absl::Status& status,
                             absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(context, ": ", status.message()));
}

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_STATUS_H_
