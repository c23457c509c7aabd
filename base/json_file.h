// Reading JSON documents: a file's text, and text parsed to a JSON object, without
// exceptions (nlohmann throws on malformed input; these return an absl::Status naming
// the file instead). Used by the checkpoint loader (config.json, safetensors headers
// and indexes). Pure functions; any thread.
#ifndef TPSERVE_BASE_JSON_FILE_H_
#define TPSERVE_BASE_JSON_FILE_H_

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tpserve {

// Reads a whole file; NotFound (no such file) or Internal, naming `path`.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

// Parses `text` as a JSON object; InvalidArgument naming `source` if it is not valid
// JSON or not an object. A duplicate key inside any object is an error too when
// `reject_duplicate_keys` (nlohmann would otherwise keep one silently).
absl::StatusOr<nlohmann::json> ParseJsonObject(absl::string_view text, const std::string& source,
                                               bool reject_duplicate_keys);

}  // namespace tpserve

#endif  // TPSERVE_BASE_JSON_FILE_H_
