#include "jinja/json_convert.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "jinja/unicode.h"
#include "jinja/value_format.h"

namespace tpserve::jinja {
namespace {

absl::StatusOr<Value> Convert(const nlohmann::ordered_json& json, int depth) {
  if (depth > kMaxValueDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("context JSON nests deeper than ", kMaxValueDepth, " levels"));
  }
  switch (json.type()) {
    case nlohmann::json::value_t::null: return Value::None();
    case nlohmann::json::value_t::boolean: return Value::Bool(json.get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::Int(json.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value::Int(static_cast<int64_t>(u));
      }
      return Value::Float(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::Float(json.get<double>());
    case nlohmann::json::value_t::string: return Value::String(json.get<std::string>());
    case nlohmann::json::value_t::array: {
      ValueList items;
      items.reserve(json.size());
      for (const auto& item : json) {
        TPSERVE_ASSIGN_OR_RETURN(Value v, Convert(item, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      ValueMap map;
      for (const auto& [key, item] : json.items()) {
        TPSERVE_ASSIGN_OR_RETURN(Value v, Convert(item, depth + 1));
        map.Set(Value::String(key), std::move(v));
      }
      return Value::Dict(std::move(map));
    }
    case nlohmann::json::value_t::discarded: return Value();
    default: return absl::InvalidArgumentError("context JSON holds binary data");
  }
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpOptions& options) : options_(options) {
    const bool indented = options.indent.has_value();
    item_sep_ = options.item_separator.value_or(indented ? "," : ", ");
    key_sep_ = options.key_separator.value_or(": ");
  }

  absl::Status Dump(const Value& v, int level) {
    switch (v.kind()) {
      case Value::Kind::kNone: out_ += "null"; return absl::OkStatus();
      case Value::Kind::kBool: out_ += v.AsBool() ? "true" : "false"; return absl::OkStatus();
      case Value::Kind::kInt: absl::StrAppend(&out_, v.AsInt()); return absl::OkStatus();
      case Value::Kind::kFloat: out_ += FloatText(v.AsFloat()); return absl::OkStatus();
      case Value::Kind::kString: AppendString(v.AsString()); return absl::OkStatus();
      case Value::Kind::kList: case Value::Kind::kTuple: return DumpList(v.AsList(), level);
      case Value::Kind::kDict: return DumpDict(v.AsMap(), level);
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("Object of type ", v.TypeName(), " is not JSON serializable"));
    }
  }

  std::string Take() { return std::move(out_); }

 private:
  static std::string FloatText(double f) {
    if (std::isnan(f)) return "NaN";
    if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
    return PyFloatRepr(f);
  }

  void Newline(int level) {
    if (!options_.indent) return;
    out_.push_back('\n');
    for (int i = 0; i < level; ++i) out_ += *options_.indent;
  }

  absl::Status DumpList(const ValueList& items, int level) {
    if (items.empty()) {
      out_ += "[]";
      return absl::OkStatus();
    }
    out_.push_back('[');
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out_ += item_sep_;
      Newline(level + 1);
      TPSERVE_RETURN_IF_ERROR(Dump(items[i], level + 1));
    }
    Newline(level);
    out_.push_back(']');
    return absl::OkStatus();
  }

  static absl::StatusOr<std::string> KeyText(const Value& key) {
    switch (key.kind()) {
      case Value::Kind::kString: return key.AsString();
      case Value::Kind::kInt: return absl::StrCat(key.AsInt());
      case Value::Kind::kFloat: return FloatText(key.AsFloat());
      case Value::Kind::kBool: return std::string(key.AsBool() ? "true" : "false");
      case Value::Kind::kNone: return std::string("null");
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "keys must be str, int, float, bool or None, not ", key.TypeName()));
    }
  }

  absl::Status DumpDict(const ValueMap& map, int level) {
    if (map.empty()) {
      out_ += "{}";
      return absl::OkStatus();
    }
    std::vector<const ValueMap::Entry*> entries;
    for (const auto& entry : map.entries()) entries.push_back(&entry);
    if (options_.sort_keys) TPSERVE_RETURN_IF_ERROR(SortEntries(&entries));
    out_.push_back('{');
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out_ += item_sep_;
      Newline(level + 1);
      TPSERVE_ASSIGN_OR_RETURN(std::string key, KeyText(entries[i]->first));
      AppendString(key);
      out_ += key_sep_;
      TPSERVE_RETURN_IF_ERROR(Dump(entries[i]->second, level + 1));
    }
    Newline(level);
    out_.push_back('}');
    return absl::OkStatus();
  }

  static absl::Status SortEntries(std::vector<const ValueMap::Entry*>* entries) {
    bool all_strings = true;
    bool all_numbers = true;
    for (const auto* e : *entries) {
      all_strings = all_strings && e->first.is_string();
      all_numbers = all_numbers && e->first.is_number();
    }
    if (all_strings) {
      std::stable_sort(entries->begin(), entries->end(), [](const auto* a, const auto* b) {
        return a->first.AsString() < b->first.AsString();
      });
    } else if (all_numbers) {
      std::stable_sort(entries->begin(), entries->end(), [](const auto* a, const auto* b) {
        return a->first.AsFloat() < b->first.AsFloat();
      });
    } else {
      return absl::InvalidArgumentError("'<' not supported between dict keys of different types");
    }
    return absl::OkStatus();
  }

  void AppendString(const std::string& s) {
    out_.push_back('"');
    size_t pos = 0;
    while (pos < s.size()) {
      const size_t start = pos;
      const char32_t cp = NextCodePoint(s, &pos);
      switch (cp) {
        case '"': out_ += "\\\""; continue;
        case '\\': out_ += "\\\\"; continue;
        case '\n': out_ += "\\n"; continue;
        case '\r': out_ += "\\r"; continue;
        case '\t': out_ += "\\t"; continue;
        case '\b': out_ += "\\b"; continue;
        case '\f': out_ += "\\f"; continue;
        default: break;
      }
      if (cp < 0x20 || (options_.ensure_ascii && cp >= 0x7F)) {
        AppendEscape(cp);
      } else {
        out_.append(s, start, pos - start);
      }
    }
    out_.push_back('"');
  }

  void AppendEscape(char32_t cp) {
    if (cp >= 0x10000) {
      const char32_t v = cp - 0x10000;
      out_ += absl::StrFormat("\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    } else {
      out_ += absl::StrFormat("\\u%04x", static_cast<unsigned>(cp));
    }
  }

  const JsonDumpOptions& options_;
  std::string item_sep_;
  std::string key_sep_;
  std::string out_;
};

}  // namespace

absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& json) { return Convert(json, 0); }

absl::StatusOr<std::string> PyJsonDumps(const Value& value, const JsonDumpOptions& options) {
  Dumper dumper(options);
  TPSERVE_RETURN_IF_ERROR(dumper.Dump(value, 0));
  return dumper.Take();
}

}  // namespace tpserve::jinja
