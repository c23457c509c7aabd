// ResolveModelPath: tpserve's --model to the model directory the server reads and the
// workers are sent (the Assignment's model_dir). Called once, from main.
//
// --model is either a directory, used as it is (a hub snapshot's own path included), or
// a Hugging Face hub id, `org/name` (or a bare `name`) with an optional `@revision`,
// found offline in the local hub cache laid out as huggingface_hub lays it out:
//   <cache>/models--org--name/refs/<revision>        a file holding a commit hash
//   <cache>/models--org--name/snapshots/<commit>/    the files (symlinks into blobs/)
// The revision defaults to main and names a ref under refs/ or a commit under
// snapshots/. The cache root is chosen as huggingface_hub chooses it: $HF_HUB_CACHE,
// else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// $HOME/.cache/huggingface/hub. Nothing is ever downloaded.
//
// Reads the file system but not the environment: the variables come in through `env`,
// so main passes getenv and tests pass their own. Any thread.
#ifndef TPSERVE_SERVER_MODEL_PATH_H_
#define TPSERVE_SERVER_MODEL_PATH_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace tpserve {

// An environment variable's value; nullopt when it is unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

struct ModelPath {
  std::string dir;     // the directory to serve: --model itself, or a cache snapshot
  std::string hub_id;  // "org/name" when found in the hub cache; empty for a directory
};

// NotFound when --model is neither a directory nor a hub id in the cache; the message
// names every place looked: the literal path, and the cache path tried with the
// variable that chose its root. InvalidArgument for a ref file that holds no commit
// hash, or one that is not a regular file.
absl::StatusOr<ModelPath> ResolveModelPath(const std::string& model, const EnvLookup& env);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_MODEL_PATH_H_
