// Python's operators on values, as jinja2 applies them: arithmetic, string
// concatenation and repetition, comparisons, membership, iteration, and
// jinja2's attribute and item lookups (getattr falls back to getitem and back,
// a miss is an undefined value that says what was missing).
// Errors are INVALID_ARGUMENT with Python's message and no location; the
// renderer adds it.
#ifndef TPSERVE_JINJA_OPERATORS_H_
#define TPSERVE_JINJA_OPERATORS_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "jinja/value.h"

namespace tpserve::jinja {

// op: "+", "-", "*", "/", "//", "%", "**". A string or list built is refused
// above `max_bytes` (bytes, or 16 bytes per item).
absl::StatusOr<Value> BinaryOperation(std::string_view op, const Value& a, const Value& b,
                                      size_t max_bytes);
// op: "-" or "+".
absl::StatusOr<Value> UnaryOperation(std::string_view op, const Value& v);
// op: "==", "!=", "<", "<=", ">", ">=", "in", "notin".
absl::StatusOr<bool> Comparison(std::string_view op, const Value& a, const Value& b);
// Python's ordering for sort/min/max: <0, 0, >0; an error where Python's < fails.
absl::StatusOr<int> ThreeWayCompare(const Value& a, const Value& b);
// Items of a for loop over `v`: a list's items, a dict's keys, a string's
// characters; an undefined value has none.
absl::StatusOr<ValueList> Iterate(const Value& v);
// obj.name / obj[key] with jinja2's fallbacks; a miss gives an undefined value.
Value GetAttribute(const Value& obj, std::string_view name);
Value GetItem(const Value& obj, const Value& key);
// obj[start:stop:step] of a string, list or tuple.
absl::StatusOr<Value> SliceOf(const Value& obj, std::optional<int64_t> start,
                              std::optional<int64_t> stop, std::optional<int64_t> step);
// The error using an undefined value raises.
absl::Status UndefinedError(const Value& undefined);
// jinja2's object_type_repr: "'dict object'", "'None'".
std::string ObjectTypeRepr(const Value& v);

}  // namespace tpserve::jinja

#endif  // TPSERVE_JINJA_OPERATORS_H_
