// The compute threads a CPU rank's kernels use beyond the GEMMs (whose libraries have
// their own setters: SetGemmThreads, SetBf16GemmThreads): norms, activations, rotary
// embeddings, attention, int8 products. One by default; a worker sets its count once at
// start (tpserve --cpu-threads-per-rank, tpserve_worker --threads).
//
// ParallelRanges splits [0, count) into contiguous ranges run on an OpenMP team. Every
// kernel that uses it computes each item exactly as it would alone, so the thread count
// changes no bits of any output (cpu_threads_test and the kernels' tests check).
#ifndef TPSERVE_WORKER_KERNELS_CPU_CPU_THREADS_H_
#define TPSERVE_WORKER_KERNELS_CPU_CPU_THREADS_H_

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace tpserve {

// threads ≥ 1 (smaller values are taken as 1).
void SetCpuThreads(int threads);
int CpuThreads();

// body(begin, end) over [0, count) in at most CpuThreads() contiguous ranges of at least
// `min_per_thread` items each (so small counts run inline, with no team); returns when
// all are done. body must be safe to run concurrently on disjoint ranges.
void ParallelRanges(int64_t count, int64_t min_per_thread,
                    absl::FunctionRef<void(int64_t begin, int64_t end)> body);

// body(i) for each i in [0, count), the items handed out one at a time to at most
// CpuThreads() threads (for items of uneven cost); returns when all are done. body must
// be safe to run concurrently on different items.
void ParallelEach(int64_t count, absl::FunctionRef<void(int64_t item)> body);

// body(begin, end) over [0, count) in contiguous chunks that at most `threads` threads
// take as each becomes free, each chunk a share of the items not yet taken (about 1/(2 ·
// threads) of them, at least `min_chunk`): a thread that runs slower, or starts later,
// takes fewer items, so none waits long for the others at the end. Returns when all are
// done. For work whose items cost the same but whose threads may not run at the same
// speed (a GEMM's output blocks, streamed from memory while other work shares the CPUs).
// body must be safe to run concurrently on disjoint ranges. threads < 1 is taken as 1.
void ParallelChunks(int64_t count, int64_t min_chunk, int threads,
                    absl::FunctionRef<void(int64_t begin, int64_t end)> body);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_CPU_THREADS_H_
