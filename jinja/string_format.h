// Python's two string formatting forms: "%s and %d" % args (printf style) and
// "{} {0} {name}".format(...).
#ifndef TPSERVE_JINJA_STRING_FORMAT_H_
#define TPSERVE_JINJA_STRING_FORMAT_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "jinja/value.h"

namespace tpserve::jinja {

// `args`: a tuple of values, a dict for "%(key)s", or one value.
absl::StatusOr<Value> PercentFormat(std::string_view format, const Value& args, size_t max_bytes);
// Replacement fields "{}", "{0}", "{name}" with an optional ":spec" of fill,
// align, width and precision; "{{" and "}}" are braces.
absl::StatusOr<Value> BraceFormat(std::string_view format, const CallArgs& args, size_t max_bytes);

}  // namespace tpserve::jinja

#endif  // TPSERVE_JINJA_STRING_FORMAT_H_
