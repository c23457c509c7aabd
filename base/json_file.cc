#include "base/json_file.h"

#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/json_fields.h"
#include "base/regular_file.h"

namespace tpserve {

using nlohmann::json;

absl::StatusOr<json> ParseJsonObject(absl::string_view text, const std::string& source,
                                     bool reject_duplicate_keys) {
  // One set of seen keys per open object; a key event belongs to the innermost one.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  json::parser_callback_t callback = [&](int /*depth*/, json::parse_event_t event,
                                         json& parsed) {
    if (!reject_duplicate_keys) return true;
    if (event == json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == json::parse_event_t::object_end && !open_objects.empty()) {
      open_objects.pop_back();
    }
    if (event == json::parse_event_t::key && !open_objects.empty() && duplicate.empty() &&
        parsed.is_string() && !open_objects.back().insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json value;
  try {
    value = json::parse(text.begin(), text.end(), callback);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON: ", e.what()));
  }
  if (!duplicate.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": key \"", duplicate, "\" appears twice in one JSON object"));
  }
  if (!value.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": expected a JSON object, got ", JsonTypeName(value)));
  }
  return value;
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path, uint64_t max_bytes) {
  return ReadRegularFile(path, max_bytes);
}

}  // namespace tpserve
