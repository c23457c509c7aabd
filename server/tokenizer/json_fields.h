// Typed, path-aware reads from a parsed tokenizer.json, so that every load error
// names the field that broke the rule ("pre_tokenizer.pretokenizers[1].pattern").
#ifndef TPSERVE_SERVER_TOKENIZER_JSON_FIELDS_H_
#define TPSERVE_SERVER_TOKENIZER_JSON_FIELDS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tpserve {

// A JSON value with the path that leads to it. Does not own the value.
class JsonField {
 public:
  JsonField(const nlohmann::json& value, std::string path)
      : value_(&value), path_(std::move(path)) {}

  const nlohmann::json& value() const { return *value_; }
  const std::string& path() const { return path_; }
  bool is_null() const { return value_->is_null(); }
  bool Has(std::string_view key) const;

  // Members and elements; a missing member reads as null.
  JsonField operator[](std::string_view key) const;
  JsonField At(size_t index) const;

  absl::StatusOr<std::string> String() const;
  absl::StatusOr<bool> Bool() const;
  absl::StatusOr<int64_t> Int() const;
  // Null or missing gives the default.
  absl::StatusOr<bool> BoolOr(bool fallback) const;
  absl::StatusOr<int64_t> IntOr(int64_t fallback) const;
  absl::Status ExpectArray() const;
  absl::Status ExpectObject() const;

  absl::Status Error(std::string_view rule) const;

 private:
  const nlohmann::json* value_;
  std::string path_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TOKENIZER_JSON_FIELDS_H_
