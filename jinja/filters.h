// jinja2's builtin filters (length, join, default, map, select, sort, indent,
// ...) and transformers' tojson, by name. Each takes the renderer (to apply
// other filters and tests and charge budgets), the input and the call's
// arguments; errors carry Python's message and no location.
#ifndef TPSERVE_JINJA_FILTERS_H_
#define TPSERVE_JINJA_FILTERS_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "jinja/value.h"

namespace tpserve::jinja {

using FilterFn = absl::StatusOr<Value> (*)(Renderer& renderer, const Value& input,
                                           const CallArgs& args);

// The filter named `name`, or null.
FilterFn FindFilter(std::string_view name);

// The filters of sequences, in filters_sequence.cc (FindFilter looks here too).
FilterFn FindSequenceFilter(std::string_view name);

}  // namespace tpserve::jinja

#endif  // TPSERVE_JINJA_FILTERS_H_
