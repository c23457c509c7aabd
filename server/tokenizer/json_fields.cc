#include "server/tokenizer/json_fields.h"

#include "absl/strings/str_cat.h"
#include "server/tokenizer/string_map.h"

namespace tpserve {
namespace {

const nlohmann::json& Null() {
  static const nlohmann::json* null = new nlohmann::json(nullptr);
  return *null;
}

}  // namespace

bool JsonField::Has(std::string_view key) const {
  return value_->is_object() && value_->find(key) != value_->end();
}

JsonField JsonField::operator[](std::string_view key) const {
  std::string path = path_.empty() ? std::string(key) : absl::StrCat(path_, ".", AbslView(key));
  if (!value_->is_object()) return JsonField(Null(), std::move(path));
  auto it = value_->find(key);
  return JsonField(it == value_->end() ? Null() : *it, std::move(path));
}

JsonField JsonField::At(size_t index) const {
  std::string path = absl::StrCat(path_, "[", index, "]");
  if (!value_->is_array() || index >= value_->size()) return JsonField(Null(), std::move(path));
  return JsonField((*value_)[index], std::move(path));
}

absl::Status JsonField::Error(std::string_view rule) const {
  return absl::InvalidArgumentError(absl::StrCat(path_, ": ", AbslView(rule)));
}

absl::StatusOr<std::string> JsonField::String() const {
  if (!value_->is_string()) return Error("expected a string");
  return value_->get<std::string>();
}

absl::StatusOr<bool> JsonField::Bool() const {
  if (!value_->is_boolean()) return Error("expected true or false");
  return value_->get<bool>();
}

absl::StatusOr<int64_t> JsonField::Int() const {
  if (!value_->is_number_integer()) return Error("expected an integer");
  return value_->get<int64_t>();
}

absl::StatusOr<bool> JsonField::BoolOr(bool fallback) const {
  return value_->is_null() ? fallback : Bool();
}

absl::StatusOr<int64_t> JsonField::IntOr(int64_t fallback) const {
  return value_->is_null() ? fallback : Int();
}

absl::Status JsonField::ExpectArray() const {
  return value_->is_array() ? absl::OkStatus() : Error("expected an array");
}

absl::Status JsonField::ExpectObject() const {
  return value_->is_object() ? absl::OkStatus() : Error("expected an object");
}

}  // namespace tpserve
