// AQ_CHECK: aborts with file, line and the failed condition. Only for broken
// invariants inside Aqueduct; anything a user or a peer can cause returns an
// absl::Status instead. (Debian's abseil 20220623 predates absl/log.)
#ifndef AQUEDUCT_COMMON_CHECK_H_
#define AQUEDUCT_COMMON_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define AQ_CHECK(cond)                                                      \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                  \
      std::abort();                                                         \
    }                                                                       \
  } while (0)

#endif  // AQUEDUCT_COMMON_CHECK_H_
