#include "worker/comm/comm_group.h"

#include <cstring>
#include <vector>

#include "base/status_macros.h"

namespace tpserve {

absl::StatusOr<Tensor> AllGatherLastDim(CommGroup& comm, const Tensor& local) {
  const int world = comm.size();
  if (world == 1) return local;
  const int64_t n = local.dim(-1);
  const int64_t rows = local.numel() / n;
  // Both written whole: the gather fills `gathered`, the copies below fill `out`.
  Tensor gathered = Tensor::Uninitialized({world, rows, n});
  TPSERVE_RETURN_IF_ERROR(comm.AllGather(local.span(), gathered.span()));
  // gathered: [world, rows, n] -> out: [rows, world·n]
  Shape shape = local.shape();
  shape.back() = n * world;
  Tensor out = Tensor::Uninitialized(shape);
  for (int r = 0; r < world; ++r) {
    const float* src = gathered.data() + static_cast<size_t>(r) * rows * n;
    for (int64_t i = 0; i < rows; ++i) {
      std::memcpy(out.data() + (i * world + r) * n, src + i * n, n * sizeof(float));
    }
  }
  return out;
}

}  // namespace tpserve
