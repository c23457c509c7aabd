// TPSERVE_CHECK: aborts on a broken programmer invariant (never on bad input,
// which gets an absl::Status). Abseil 20220623 predates absl/log's CHECK.
#ifndef TPSERVE_BASE_CHECK_H_
#define TPSERVE_BASE_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define TPSERVE_CHECK(cond)                                                     \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                             \
    }                                                                           \
  } while (0)

#endif  // TPSERVE_BASE_CHECK_H_
