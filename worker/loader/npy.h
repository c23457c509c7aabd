// Reading and writing fp32 .npy files (NumPy format 1.0/2.0, little-endian '<f4',
// C order), for the forward tool's output and the golden logits the tests compare.
#ifndef TPSERVE_WORKER_LOADER_NPY_H_
#define TPSERVE_WORKER_LOADER_NPY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/tensor.h"

namespace tpserve {

absl::Status WriteNpy(const std::string& path, const Tensor& t);

// Errors name the file and what is wrong (magic, dtype, order, shape, size).
absl::StatusOr<Tensor> ReadNpy(const std::string& path);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_LOADER_NPY_H_
