// Methods templates call on values, as Python's str, dict and list have them
// (the non-mutating ones: the sandbox is immutable): "a b".split(),
// msg.get("x"), items.index(3), ...
#ifndef TPSERVE_JINJA_METHODS_H_
#define TPSERVE_JINJA_METHODS_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "jinja/value.h"

namespace tpserve::jinja {

bool HasMethod(const Value& receiver, std::string_view name);
// receiver.name as a callable value.
Value BindMethod(const Value& receiver, std::string name);
absl::StatusOr<Value> CallMethod(Renderer& renderer, const Value& receiver, std::string_view name,
                                 const CallArgs& args);

}  // namespace tpserve::jinja

#endif  // TPSERVE_JINJA_METHODS_H_
