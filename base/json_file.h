// Reading JSON documents: a file's text, and text parsed to a JSON object, without
// exceptions (nlohmann throws on malformed input; these return an absl::Status naming
// the file instead). Used by the checkpoint loader (config.json, safetensors headers
// and indexes). Any thread.
#ifndef TPSERVE_BASE_JSON_FILE_H_
#define TPSERVE_BASE_JSON_FILE_H_

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tpserve {

// The cap on a config-style JSON file (config.json, generation_config.json,
// model.safetensors.index.json, tokenizer_config.json): real ones are kilobytes, the
// largest indexes a few MB, so 64 MiB refuses only a file that is not one of them.
inline constexpr uint64_t kMaxJsonFileBytes = uint64_t{64} << 20;

// Reads a whole regular file of at most `max_bytes` (base/regular_file.h: symlinks
// followed, a FIFO or device refused without blocking). NotFound (no such file),
// InvalidArgument (not a regular file, over the cap) or Internal, naming `path`.
absl::StatusOr<std::string> ReadTextFile(const std::string& path,
                                         uint64_t max_bytes = kMaxJsonFileBytes);

// Parses `text` as a JSON object; InvalidArgument naming `source` if it is not valid
// JSON or not an object. A duplicate key inside any object is an error too when
// `reject_duplicate_keys` (nlohmann would otherwise keep one silently).
absl::StatusOr<nlohmann::json> ParseJsonObject(absl::string_view text, const std::string& source,
                                               bool reject_duplicate_keys);

}  // namespace tpserve

#endif  // TPSERVE_BASE_JSON_FILE_H_
