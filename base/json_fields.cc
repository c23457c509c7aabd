#include "base/json_fields.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"

namespace tpserve {
namespace {

using nlohmann::json;

// Debian's abseil has its own string_view, which absl::StrCat takes.
absl::string_view View(std::string_view s) { return absl::string_view(s.data(), s.size()); }

const json& Null() {
  static const json* null = new json(nullptr);
  return *null;
}

}  // namespace

std::string JsonTypeName(const json& value) {
  if (value.is_number_unsigned()) return "non-negative integer";
  if (value.is_number_integer()) return "negative integer";
  if (value.is_number_float()) return "floating-point number";
  return value.type_name();
}

bool JsonField::Has(std::string_view key) const {
  return value_->is_object() && value_->find(key) != value_->end();
}

JsonField JsonField::operator[](std::string_view key) const {
  std::string path = path_.empty() ? std::string(key) : absl::StrCat(path_, ".", View(key));
  if (!value_->is_object()) return JsonField(Null(), source_, std::move(path));
  auto it = value_->find(key);
  return JsonField(it == value_->end() ? Null() : *it, source_, std::move(path));
}

JsonField JsonField::At(size_t index) const {
  std::string path = absl::StrCat(path_, "[", index, "]");
  if (!value_->is_array() || index >= value_->size()) {
    return JsonField(Null(), source_, std::move(path));
  }
  return JsonField((*value_)[index], source_, std::move(path));
}

absl::Status JsonField::Error(std::string_view rule, absl::StatusCode code) const {
  if (source_.empty()) return absl::Status(code, absl::StrCat(path_, ": ", View(rule)));
  return absl::Status(code, absl::StrCat(source_, ": key \"", path_, "\": ", View(rule)));
}

absl::Status JsonField::Missing() const {
  const std::string where = source_.empty() ? "" : absl::StrCat(source_, ": ");
  return absl::InvalidArgumentError(absl::StrCat(where, "missing required key \"", path_, "\""));
}

absl::Status JsonField::TypeError(std::string_view expected) const {
  return Error(absl::StrCat("expected ", View(expected), ", got ", JsonTypeName(*value_)));
}

absl::StatusOr<std::string> JsonField::String() const {
  if (is_null()) return Missing();
  if (!value_->is_string()) return TypeError("a string");
  return value_->get<std::string>();
}

absl::StatusOr<bool> JsonField::Bool() const {
  if (is_null()) return Missing();
  if (!value_->is_boolean()) return TypeError("a boolean");
  return value_->get<bool>();
}

absl::StatusOr<int64_t> JsonField::IntInRange(int64_t min, int64_t max) const {
  if (is_null()) return Missing();
  if (!value_->is_number_integer()) return TypeError("an integer");
  const bool in_range = value_->is_number_unsigned()
                            ? value_->get<uint64_t>() <= static_cast<uint64_t>(max)
                            : value_->get<int64_t>() >= min && value_->get<int64_t>() <= max;
  if (!in_range) return Error(absl::StrCat("value ", value_->dump(), " is out of range"));
  return value_->get<int64_t>();
}

absl::StatusOr<int64_t> JsonField::Int() const {
  return IntInRange(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
}

absl::StatusOr<int32_t> JsonField::Int32() const {
  TPSERVE_ASSIGN_OR_RETURN(
      int64_t value,
      IntInRange(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
  return static_cast<int32_t>(value);
}

absl::StatusOr<double> JsonField::Double() const {
  if (is_null()) return Missing();
  if (!value_->is_number()) return TypeError("a number");
  return value_->get<double>();
}

absl::StatusOr<std::string> JsonField::StringOr(std::string fallback) const {
  if (is_null()) return fallback;
  return String();
}

absl::StatusOr<bool> JsonField::BoolOr(bool fallback) const {
  return is_null() ? fallback : Bool();
}

absl::StatusOr<int64_t> JsonField::IntOr(int64_t fallback) const {
  return is_null() ? fallback : Int();
}

absl::StatusOr<int32_t> JsonField::Int32Or(int32_t fallback) const {
  return is_null() ? fallback : Int32();
}

absl::StatusOr<double> JsonField::DoubleOr(double fallback) const {
  return is_null() ? fallback : Double();
}

absl::Status JsonField::ExpectArray() const {
  return value_->is_array() ? absl::OkStatus() : TypeError("an array");
}

absl::Status JsonField::ExpectObject() const {
  return value_->is_object() ? absl::OkStatus() : TypeError("an object");
}

}  // namespace tpserve
