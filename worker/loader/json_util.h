// Exception-free wrappers around nlohmann::json for the loader's file parsers.
//
// nlohmann throws on malformed input; everything here catches and returns an
// absl::Status naming `source` (the file) instead. Pure functions; any thread.
#ifndef TPSERVE_WORKER_LOADER_JSON_UTIL_H_
#define TPSERVE_WORKER_LOADER_JSON_UTIL_H_

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tpserve {

// Parses `text` as a JSON object. A duplicate key inside any object is an error when
// `reject_duplicate_keys` (nlohmann would otherwise keep one silently).
absl::StatusOr<nlohmann::json> ParseJsonObject(absl::string_view text, const std::string& source,
                                               bool reject_duplicate_keys);

// The JSON type of `value` in words ("string", "negative integer", ...), for errors.
std::string JsonTypeName(const nlohmann::json& value);

// True for a JSON integer in [0, 2^64) (not a float such as 4.0 or 1e30).
bool IsJsonUnsigned(const nlohmann::json& value);

// Reads a whole file; NotFound / Internal naming `path`.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_LOADER_JSON_UTIL_H_
