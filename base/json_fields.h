// JsonField: typed, exception-free reads from a parsed nlohmann::json document, each
// error naming the field that broke the rule. The one reader behind config.json,
// generation_config.json (worker/loader/hf_config) and tokenizer.json /
// tokenizer_config.json (server/tokenizer).
//
// A field is a view: a value, the source that holds it (a file name, or empty) and its
// path from the root ("rope_scaling.factor", "pre_tokenizer.pretokenizers[1].pattern").
// It does not own the value, which must outlive every field read from it. All methods
// are const and touch no shared state; any thread.
//
// Errors are INVALID_ARGUMENT (unless Error is given another code), worded
//   with a source:     config.json: key "rope_scaling.factor": expected a number, got string
//                      config.json: missing required key "rope_scaling.factor"
//   without a source:  model.vocab.a: expected an integer, got string
//                      missing required key "model.type"
// The second form is for callers that put the file name in front of every error of a
// load themselves (the tokenizer does, for errors that are not about one field too).
#ifndef TPSERVE_BASE_JSON_FIELDS_H_
#define TPSERVE_BASE_JSON_FIELDS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tpserve {

// The JSON type of `value` in words ("string", "negative integer", ...), for errors.
std::string JsonTypeName(const nlohmann::json& value);

class JsonField {
 public:
  // `value` read from `source`; `path` names `value` itself (empty for a document root).
  explicit JsonField(const nlohmann::json& value, std::string source = "",
                     std::string path = "")
      : value_(&value), source_(std::move(source)), path_(std::move(path)) {}

  const nlohmann::json& value() const { return *value_; }
  const std::string& source() const { return source_; }
  const std::string& path() const { return path_; }
  // Null, or missing from its parent.
  bool is_null() const { return value_->is_null(); }
  // This is an object with the member `key`, possibly null.
  bool Has(std::string_view key) const;

  // A member or an element; one that is missing (or whose parent is not an object or
  // an array) reads as null, still with its path.
  JsonField operator[](std::string_view key) const;
  JsonField At(size_t index) const;

  // Required reads: null or missing is "missing required key", another type is
  // "expected ..., got <type>".
  absl::StatusOr<std::string> String() const;
  absl::StatusOr<bool> Bool() const;
  absl::StatusOr<int64_t> Int() const;    // an integer (not 4.0) that fits int64
  absl::StatusOr<int32_t> Int32() const;  // an integer that fits int32
  absl::StatusOr<double> Double() const;  // any number, integer or floating-point

  // Optional reads: null or missing gives `fallback`; another type is still an error.
  absl::StatusOr<std::string> StringOr(std::string fallback) const;
  absl::StatusOr<bool> BoolOr(bool fallback) const;
  absl::StatusOr<int64_t> IntOr(int64_t fallback) const;
  absl::StatusOr<int32_t> Int32Or(int32_t fallback) const;
  absl::StatusOr<double> DoubleOr(double fallback) const;

  // The containers, whose members the caller then reads; null is a wrong type here
  // ("expected an object, got null").
  absl::Status ExpectArray() const;
  absl::Status ExpectObject() const;

  // An error about this field: "`rule`" after the field's name (see the top).
  absl::Status Error(std::string_view rule,
                     absl::StatusCode code = absl::StatusCode::kInvalidArgument) const;
  absl::Status Missing() const;

 private:
  absl::Status TypeError(std::string_view expected) const;
  absl::StatusOr<int64_t> IntInRange(int64_t min, int64_t max) const;

  const nlohmann::json* value_;
  std::string source_;
  std::string path_;
};

}  // namespace tpserve

#endif  // TPSERVE_BASE_JSON_FIELDS_H_
