// Checkpoint: read-only access to the tensors of a Hugging Face safetensors checkpoint.
//
// Opens either DIR/model.safetensors or DIR/model.safetensors.index.json (sharded),
// memory-maps every file, and validates every header the way the safetensors reference
// implementation does before anything is read. The mappings live as long as the
// Checkpoint. Thread-safe for concurrent reads after Open returns.
#ifndef TPSERVE_WORKER_LOADER_CHECKPOINT_H_
#define TPSERVE_WORKER_LOADER_CHECKPOINT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/dtype.h"
#include "worker/loader/safetensors.h"
#include "worker/tensor.h"

namespace tpserve {

// TensorView (one tensor inside a mapped file) is declared in safetensors.h.
class Checkpoint {
 public:
  // `dir` holds model.safetensors or model.safetensors.index.json. Every error names the
  // file, the tensor where there is one, and the rule broken.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);
  ~Checkpoint();

  // Names of all tensors, sorted.
  std::vector<std::string> TensorNames() const;
  bool Contains(absl::string_view name) const;

  // NotFound naming the tensor and checkpoint if absent.
  absl::StatusOr<TensorView> Get(absl::string_view name) const;

  // Get + a shape check ("tensor X in FILE has shape [a, b], expected [c, d]") +
  // conversion to fp32.
  absl::StatusOr<Tensor> GetFloat(absl::string_view name, const Shape& expected_shape) const;
  // GetFloat into *out, reusing its storage (a scratch tensor: see TensorViewToFloatInto).
  absl::Status GetFloatInto(absl::string_view name, const Shape& expected_shape,
                            Tensor* out) const;

 private:
  Checkpoint() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_LOADER_CHECKPOINT_H_
