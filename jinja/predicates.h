// jinja2's tests ("x is defined", "n is divisibleby 3", ...) by name.
#ifndef TPSERVE_JINJA_PREDICATES_H_
#define TPSERVE_JINJA_PREDICATES_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "jinja/value.h"

namespace tpserve::jinja {

using TestFn = absl::StatusOr<bool> (*)(const Value& input, const CallArgs& args);

// The test named `name`, or null.
TestFn FindTest(std::string_view name);

}  // namespace tpserve::jinja

#endif  // TPSERVE_JINJA_PREDICATES_H_
