// The functions every template sees, as transformers' environment defines
// them: range, namespace, dict, raise_exception and strftime_now (not jinja2's
// cycler, joiner and lipsum). Context variables of the same name take precedence.
#ifndef TPSERVE_JINJA_GLOBALS_H_
#define TPSERVE_JINJA_GLOBALS_H_

#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "jinja/value.h"

namespace tpserve::jinja {

// The global named `name`, or null. The values are shared by all renders.
const Value* FindGlobal(std::string_view name);

// Python's time.strftime(format) of `time` in `zone`, for the C library's
// directives (%Y %m %d %H %M %S %b %B %a %A %p %j %y %Z %z %%, ...).
std::string PyStrftime(std::string_view format, absl::Time time, absl::TimeZone zone);

}  // namespace tpserve::jinja

#endif  // TPSERVE_JINJA_GLOBALS_H_
