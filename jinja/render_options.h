// What one render may use: the clock strftime_now reads and the budgets that
// stop a hostile template or a huge input with a clear error.
#ifndef TPSERVE_JINJA_RENDER_OPTIONS_H_
#define TPSERVE_JINJA_RENDER_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/time/time.h"

namespace tpserve::jinja {

struct RenderOptions {
  // The time strftime_now formats, in the local time zone; null: absl::Now().
  std::function<absl::Time()> now;
  // The rendered text, and any one string a template builds, stay within this.
  size_t max_output_bytes = size_t{8} << 20;
  // Statements, expressions and loop iterations evaluated, in all.
  int64_t max_steps = 20'000'000;
  // Macros (and call blocks) active at once.
  int max_macro_depth = 64;
};

}  // namespace tpserve::jinja

#endif  // TPSERVE_JINJA_RENDER_OPTIONS_H_
