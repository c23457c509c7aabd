#include "worker/models/cuda/cuda_graphs.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "worker/cuda/cuda_status.h"

namespace tpserve {

std::vector<int> DecodeGraphSizes(int max_batch) {
  std::vector<int> sizes;
  for (int s = 1; s < max_batch; s *= 2) sizes.push_back(s);
  if (max_batch >= 1) sizes.push_back(max_batch);
  return sizes;
}

int DecodeGraphs::PaddedSize(int seqs) const {
  auto it = std::lower_bound(sizes_.begin(), sizes_.end(), seqs);
  return it == sizes_.end() ? 0 : *it;
}

absl::Status DecodeGraphs::Run(int size, cudaStream_t stream,
                               absl::FunctionRef<absl::Status()> enqueue, bool* capture_failed) {
  *capture_failed = false;
  auto it = execs_.find(size);
  if (it == execs_.end() && warmed_.insert(size).second) return enqueue();
  if (it == execs_.end()) {
    *capture_failed = true;  // until the graph is made
    TPSERVE_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const absl::Status enqueued = enqueue();
    cudaGraph_t graph = nullptr;
    // Ending the capture is needed even when enqueueing failed, to leave capture mode.
    const absl::Status ended = CudaStatus(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    cudaGetLastError();  // a failed capture leaves a sticky-free error behind
    if (!enqueued.ok() || !ended.ok()) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      return absl::InternalError(absl::StrCat("capturing the decode graph of batch ", size, ": ",
                                              (enqueued.ok() ? ended : enqueued).message()));
    }
    cudaGraphExec_t exec = nullptr;
    const absl::Status made =
        CudaStatus(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    cudaGraphDestroy(graph);
    if (!made.ok()) return made;
    it = execs_.emplace(size, exec).first;
    *capture_failed = false;
  }
  return CudaStatus(cudaGraphLaunch(it->second, stream), "cudaGraphLaunch");
}

void DecodeGraphs::Clear() {
  for (auto& [size, exec] : execs_) cudaGraphExecDestroy(exec);
  execs_.clear();
  warmed_.clear();
}

}  // namespace tpserve
