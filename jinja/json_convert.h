// Values to and from JSON: FromJson builds a render context (object key order
// kept; JSON integers become ints, other numbers floats) and PyJsonDumps is
// Python's json.dumps, which transformers' tojson filter calls.
#ifndef TPSERVE_JINJA_JSON_CONVERT_H_
#define TPSERVE_JINJA_JSON_CONVERT_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "jinja/value.h"
#include "nlohmann/json.hpp"

namespace tpserve::jinja {

// Containers nested deeper than this are refused (FromJson) or fail to render.
inline constexpr int kMaxValueDepth = 256;

// INVALID_ARGUMENT if the JSON nests deeper than kMaxValueDepth or holds binary.
absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& json);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  // Python's indent: absent for one line, else the text repeated per level.
  std::optional<std::string> indent;
  // Python's separators; absent means ", "/": " (or ","/": " with an indent).
  std::optional<std::string> item_separator;
  std::optional<std::string> key_separator;
  bool sort_keys = false;
};

// json.dumps(value, ...). INVALID_ARGUMENT as Python raises TypeError/ValueError:
// an undefined value, namespace or callable, a key that is not a scalar, or
// sort_keys over keys that do not compare.
absl::StatusOr<std::string> PyJsonDumps(const Value& value, const JsonDumpOptions& options);

}  // namespace tpserve::jinja

#endif  // TPSERVE_JINJA_JSON_CONVERT_H_
