#include "worker/kernels/cpu/bf16_gemm.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "worker/dtype.h"
#include "worker/kernels/cpu/bf16_amx.h"
#include "worker/kernels/cpu/bf16_avx2.h"
#include "worker/kernels/cpu/bf16_avx512.h"
#include "worker/kernels/cpu/cpu_threads.h"
#include "worker/kernels/cpu/scratch.h"
#include "worker/tensor.h"

// Design, from measurements on this project's 2-core AVX512-BF16/AMX host (oneDNN 2.6.3;
// docs/design.md, "Model core"):
// - oneDNN 2.6 picks brgemm (AMX or AVX512-BF16) only for a static M; a primitive for a
//   runtime M (DNNL_RUNTIME_DIM_VAL) falls back to "gemm:jit", which wants plain weights
//   and packs them on every call. So primitives are made per row count, all reading the
//   one layout chosen at packing. brgemm chose the same layout (BA16a64b2a) for every M
//   from 1 to 2048 and every shape tried, on AMX and on AVX512-BF16 alike.
// - A primitive costs ~0.6 ms to create and ~135 KiB of JIT code, so row counts are
//   capped: a call runs 64-row chunks plus one remainder chunk, which bounds a weight at
//   64 row counts (x2 for accumulate). At M = 2048 64-row chunks ran as fast as one
//   2048-row primitive (the weight chunk stays in cache between chunks).
// - oneDNN's own primitive cache (1024 entries) hands weights of one shape the same
//   JIT code, so the per-weight cache here costs a lookup, not a copy of the code.
// - Scratchpads are per call (scratchpad_mode::user): oneDNN's library-managed scratchpad
//   is shared by all primitives and ties each primitive to the thread that created it.
// - This project's kernels run the products: AMX tiles (bf16_amx.h) or, without AMX,
//   vdpbf16ps (bf16_avx512.h), each on a layout of its own under Bf16Kernel::kOwn (tile by
//   tile; blocks of 48 outputs), both read by them only. brgemm's k blocking changes with
//   the row count, so a row's low bits depended on its batch; the AMX kernel is also
//   1.2-1.9x faster (docs/perf.md). oneDNN packs the weight, and its matmul runs on it,
//   only with SetBf16Kernel(kOneDnn) at packing (or kAvx512Bf16, which runs vdpbf16ps on
//   oneDNN's blocks).

namespace tpserve {
namespace {

using dnnl::memory;
using DataType = memory::data_type;
using Tag = memory::format_tag;

constexpr size_t kAlignment = 64;
constexpr int64_t kMinBlocksPerRun = 4;  // of a GEMM's output blocks, per thread's turn
std::atomic<int> bf16_gemm_threads{0};
std::atomic<Bf16Kernel> bf16_kernel{Bf16Kernel::kOwn};

// OpenMP keeps its thread count per calling thread; apply the process setting to this one.
void ApplyThreadSetting() {
  const int threads = bf16_gemm_threads.load(std::memory_order_relaxed);
  if (threads > 0 && omp_get_max_threads() != threads) omp_set_num_threads(threads);
}

absl::Status CheckFinite(const uint16_t* w, int64_t n_out, int64_t k) {
  const int64_t i = FirstNonFiniteBf16(w, n_out * k);
  if (i < 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "bf16 weight [%d, %d] is not finite (bits 0x%04x)", i / k, i % k, w[i]));
}

// HF's [n_out, k] row-major weight is oneDNN's [k, n_out] matrix in "ba" order.
memory::desc PlainWeightDesc(int64_t n_out, int64_t k) {
  return memory::desc({k, n_out}, DataType::bf16, Tag::ba);
}

// The blocked layout oneDNN's matmul reads without repacking, or nullopt if it would
// only run from a plain layout (no bf16 brgemm on this ISA).
std::optional<memory::desc> PackedLayout(const dnnl::engine& engine, int64_t n_out, int64_t k) {
  const int64_t m = PackedBf16Weight::kRowsPerPrimitive;
  const memory::desc any({k, n_out}, DataType::bf16, Tag::any);
  try {
    dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(memory::desc({m, k}, DataType::bf16, Tag::ab), any,
                           memory::desc({m, n_out}, DataType::f32, Tag::ab)),
        engine);
    memory::desc chosen = pd.weights_desc();
    if (chosen.data.format_kind == dnnl_blocked &&
        chosen.data.format_desc.blocking.inner_nblks > 0) {
      return chosen;
    }
  } catch (const dnnl::error&) {
    // No bf16 matmul at all on this ISA (below AVX-512).
  }
  return std::nullopt;
}

// The strides of `desc` if it is a layout bf16_amx.h reads: [k, n_out] in 32 x B blocks,
// each [16][B][2] (BA16a64b2a, or BA16a48b2a for some weights under 128 outputs).
std::optional<bf16_amx::Layout> OwnLayout(const memory::desc& desc) {
  const dnnl_memory_desc_t& d = desc.data;
  if (d.ndims != 2 || d.format_kind != dnnl_blocked) return std::nullopt;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  if (b.inner_nblks != 3 || b.inner_blks[0] != 16 || b.inner_idxs[0] != 0 ||
      b.inner_idxs[1] != 1 || b.inner_blks[2] != 2 || b.inner_idxs[2] != 0 ||
      d.offset0 != 0) {
    return std::nullopt;
  }
  const bf16_amx::Layout layout{b.inner_blks[1], b.strides[0], b.strides[1]};
  if (!layout.valid()) return std::nullopt;
  return layout;
}

// One row count's matmul, and the reorder that rounds its x to bf16 (oneDNN's, with
// vcvtneps2bf16 where the CPU has it: ~6x faster than a scalar loop, which at prefill
// sizes cost a fifth of the matmul).
struct Primitive {
  dnnl::reorder to_bf16;
  dnnl::matmul matmul;
  memory::desc x, src, dst;                          // x: f32 [rows, k]; src: its bf16
  memory::desc to_bf16_scratchpad, matmul_scratchpad;
};

dnnl::primitive_attr UserScratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

}  // namespace

struct PackedBf16Weight::Impl {
  // (rows, accumulate, OpenMP threads): a primitive's parallel split is fixed when made.
  using Key = std::tuple<int64_t, bool, int>;

  // Storage for `n` bytes, zeroed (oneDNN's padding must read as zeros) and aligned.
  void Allocate(size_t n);
  // The cached primitive for `rows` rows, made on first use; throws dnnl::error.
  std::shared_ptr<const Primitive> GetPrimitive(int64_t rows, bool accumulate, int threads) const;
  // x: [m, k] -> y: [m, n_out]; the caller has applied the thread setting.
  absl::Status MatMulOneDnn(const float* x, int64_t m, float* y, bool accumulate) const;
  absl::Status MatMulAvx2(const float* x, int64_t m, float* y, bool accumulate) const;
  // bf16_amx's or bf16_avx512's MatMulBlocks over x rounded by PrepareX, threads
  // splitting the output blocks.
  using BlocksFn = void (*)(const uint16_t*, int64_t, int64_t, const uint16_t*,
                            bf16_amx::Layout, int64_t, int64_t, int64_t, float*, bool);
  void MatMulOwn(BlocksFn blocks_fn, const float* x, int64_t m, float* y,
                 bool accumulate) const;
  // data ([n_out, k] bf16) into storage of `elements` in `layout`, one of this project's
  // kernels' own, by pack(data, n_out, k, out, block_begin, block_end), threads splitting
  // the output blocks; sets `own`.
  using PackFn = void (*)(const uint16_t*, int64_t, int64_t, uint16_t*, int64_t, int64_t);
  void PackOwn(const uint16_t* data, bf16_amx::Layout layout, int64_t elements, PackFn pack);

  dnnl::engine engine;
  std::unique_ptr<void, decltype(&std::free)> storage{nullptr, &std::free};
  void* data = nullptr;  // kAlignment-aligned, inside storage
  size_t bytes = 0;
  std::optional<memory> packed;  // oneDNN's view of data; nullopt: bf16_avx2's blocked layout
  // Set when this project's kernels read the weight: oneDNN's layout (`packed` set), or
  // their own (tile by tile for AMX, 48-output blocks for vdpbf16ps; `packed` unset).
  std::optional<bf16_amx::Layout> own;
  int64_t n_out = 0, k = 0;
  mutable absl::Mutex mu;
  mutable absl::flat_hash_map<Key, std::shared_ptr<const Primitive>> cache ABSL_GUARDED_BY(mu);
};

std::shared_ptr<const Primitive> PackedBf16Weight::Impl::GetPrimitive(int64_t rows,
                                                                    bool accumulate,
                                                                    int threads) const {
  absl::MutexLock lock(&mu);
  auto it = cache.find(Key{rows, accumulate, threads});
  if (it != cache.end()) return it->second;
  auto p = std::make_shared<Primitive>();
  p->x = memory::desc({rows, k}, DataType::f32, Tag::ab);
  p->src = memory::desc({rows, k}, DataType::bf16, Tag::ab);
  p->dst = memory::desc({rows, n_out}, DataType::f32, Tag::ab);
  dnnl::reorder::primitive_desc to_bf16(engine, p->x, engine, p->src, UserScratchpad());
  p->to_bf16_scratchpad = to_bf16.scratchpad_desc();
  p->to_bf16 = dnnl::reorder(to_bf16);
  dnnl::primitive_attr attr = UserScratchpad();
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p->src, packed->get_desc(), p->dst), attr,
                                  engine);
  p->matmul_scratchpad = pd.scratchpad_desc();
  p->matmul = dnnl::matmul(pd);
  cache.emplace(Key{rows, accumulate, threads}, p);
  return p;
}

void PackedBf16Weight::Impl::Allocate(size_t n) {
  storage.reset(AllocateZeroed(n + kAlignment));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(storage.get());
  data = reinterpret_cast<void*>((begin + kAlignment - 1) & ~uintptr_t{kAlignment - 1});
  bytes = n;
}

absl::Status PackedBf16Weight::Impl::MatMulOneDnn(const float* x, int64_t m, float* y,
                                                  bool accumulate) const {
  const int threads = omp_get_max_threads();
  const int64_t chunk = std::min(m, kRowsPerPrimitive);
  std::unique_ptr<uint16_t[]> x_bf16(new uint16_t[chunk * k]);  // [chunk, k]
  std::vector<uint8_t> scratchpad;  // shared by the reorder and the matmul, run in turn
  // `args` plus the scratchpad argument for `desc`, if it needs one.
  auto with_scratchpad = [&](const memory::desc& desc, std::unordered_map<int, memory> args) {
    if (desc.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, memory(desc, engine, scratchpad.data()));
    return args;
  };
  dnnl::stream stream(engine);
  for (int64_t row = 0; row < m; row += chunk) {
    const int64_t rows = std::min(chunk, m - row);
    const std::shared_ptr<const Primitive> p = GetPrimitive(rows, accumulate, threads);
    scratchpad.resize(std::max({scratchpad.size(), p->to_bf16_scratchpad.get_size(),
                                p->matmul_scratchpad.get_size()}));
    memory x_f32(p->x, engine, const_cast<float*>(x + row * k));
    memory src(p->src, engine, x_bf16.get());
    memory dst(p->dst, engine, y + row * n_out);
    p->to_bf16.execute(stream, with_scratchpad(p->to_bf16_scratchpad,
                                               {{DNNL_ARG_FROM, x_f32}, {DNNL_ARG_TO, src}}));
    p->matmul.execute(stream, with_scratchpad(p->matmul_scratchpad, {{DNNL_ARG_SRC, src},
                                                                      {DNNL_ARG_WEIGHTS, *packed},
                                                                      {DNNL_ARG_DST, dst}}));
    stream.wait();  // x_bf16 is refilled next chunk
  }
  return absl::OkStatus();
}

absl::Status PackedBf16Weight::Impl::MatMulAvx2(const float* x, int64_t m, float* y,
                                                bool accumulate) const {
  bf16_avx2::MatMul(x, m, static_cast<const uint16_t*>(data), n_out, k, y, accumulate);
  return absl::OkStatus();
}

void PackedBf16Weight::Impl::PackOwn(const uint16_t* w, bf16_amx::Layout layout,
                                     int64_t elements, PackFn pack) {
  Allocate(elements * sizeof(uint16_t));
  own = layout;
  auto* out = static_cast<uint16_t*>(data);
  ParallelChunks(bf16_amx::NumBlocks(n_out, layout), /*min_chunk=*/4, omp_get_max_threads(),
                 [&](int64_t begin, int64_t end) { pack(w, n_out, k, out, begin, end); });
}

void PackedBf16Weight::Impl::MatMulOwn(BlocksFn blocks_fn, const float* x, int64_t m,
                                       float* y, bool accumulate) const {
  thread_local Scratch<uint16_t> x_bf16;  // [PaddedRows(m), PaddedCols(k)]
  const int64_t cols = bf16_amx::PaddedCols(k);
  const auto* w = static_cast<const uint16_t*>(data);
  const int64_t blocks = bf16_amx::NumBlocks(n_out, *own);
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), blocks));
  // The team's threads see their own x_bf16 (thread_local): they are handed its data.
  uint16_t* xb = x_bf16.Get(bf16_amx::PaddedRows(m) * cols);
  // x is rounded by 16-row groups (each padded as PrepareX pads the whole), runs of at
  // least two groups a thread: a prompt's rows in parallel, a decode's inline.
  ParallelChunks(bf16_amx::PaddedRows(m) / bf16_amx::kTileRows, /*min_chunk=*/2, threads,
                 [&](int64_t begin, int64_t end) {
                   const int64_t row = begin * bf16_amx::kTileRows;
                   const int64_t rows = std::min(m, end * bf16_amx::kTileRows) - row;
                   bf16_amx::PrepareX(x + row * k, rows, k, xb + row * cols);
                 });
  if (threads <= 1) {
    blocks_fn(xb, m, k, w, *own, n_out, 0, blocks, y, accumulate);
    return;
  }
  // Threads take runs of output blocks as they become free (runs of at least
  // kMinBlocksPerRun, so that most blocks are streamed in while the one before is worked
  // on: blocks_fn prefetches within its range only). Every output is computed the same way
  // whatever the split, so neither the thread count nor the timing changes a bit.
  ParallelChunks(blocks, kMinBlocksPerRun, threads, [&](int64_t begin, int64_t end) {
    blocks_fn(xb, m, k, w, *own, n_out, begin, end, y, accumulate);
  });
}

PackedBf16Weight::PackedBf16Weight(int64_t n_out, int64_t k, std::unique_ptr<Impl> impl)
    : n_out_(n_out), k_(k), impl_(std::move(impl)) {}
PackedBf16Weight::PackedBf16Weight(PackedBf16Weight&&) noexcept = default;
PackedBf16Weight& PackedBf16Weight::operator=(PackedBf16Weight&&) noexcept = default;
PackedBf16Weight::~PackedBf16Weight() = default;

absl::StatusOr<PackedBf16Weight> PackedBf16Weight::FromBf16(const uint16_t* data, int64_t n_out,
                                                            int64_t k) {
  if (n_out <= 0 || k <= 0 || data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bf16 weight [%d, %d]: sizes must be positive, data set", n_out, k));
  }
  TPSERVE_RETURN_IF_ERROR(CheckFinite(data, n_out, k));
  auto impl = std::make_unique<Impl>();
  impl->n_out = n_out;
  impl->k = k;
  try {
    ApplyThreadSetting();
    impl->engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
    const std::optional<memory::desc> layout = PackedLayout(impl->engine, n_out, k);
    if (!layout) {
      impl->Allocate(bf16_avx2::PackedBytes(n_out, k));
      bf16_avx2::PackBlocked(data, n_out, k, static_cast<uint16_t*>(impl->data));
      return PackedBf16Weight(n_out, k, std::move(impl));
    }
    // Under kOwn a layout of this project's kernels, which oneDNN's matmul does not read,
    // so such a weight runs on its kernel whatever SetBf16Kernel says later: the tile
    // kernel's, each B tile in one piece (bf16_amx.h), or the vdpbf16ps kernel's blocks of
    // 48 outputs (bf16_avx512.h: a decode batch of up to 8 rows in one pass).
    if (bf16_kernel.load(std::memory_order_relaxed) == Bf16Kernel::kOwn) {
      if (bf16_amx::Available()) {
        impl->PackOwn(data, bf16_amx::TilesLayout(k), bf16_amx::TilesElements(n_out, k),
                      &bf16_amx::PackTiles);
        return PackedBf16Weight(n_out, k, std::move(impl));
      }
      if (bf16_avx512::Available()) {
        impl->PackOwn(data, bf16_avx512::BlocksLayout(k), bf16_avx512::BlocksElements(n_out, k),
                      &bf16_avx512::PackBlocks);
        return PackedBf16Weight(n_out, k, std::move(impl));
      }
    }
    impl->Allocate(layout->get_size());
    memory plain(PlainWeightDesc(n_out, k), impl->engine, const_cast<uint16_t*>(data));
    impl->packed = memory(*layout, impl->engine, impl->data);
    if (bf16_avx512::Available()) impl->own = OwnLayout(*layout);
    dnnl::stream stream(impl->engine);
    dnnl::reorder(plain, *impl->packed).execute(stream, plain, *impl->packed);
    stream.wait();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN packing a bf16 weight: ", e.what()));
  }
  return PackedBf16Weight(n_out, k, std::move(impl));
}

absl::StatusOr<PackedBf16Weight> PackedBf16Weight::FromFloat(const float* data, int64_t n_out,
                                                             int64_t k) {
  if (n_out <= 0 || k <= 0 || data == nullptr) return FromBf16(nullptr, n_out, k);
  std::vector<uint16_t> bf16(static_cast<size_t>(n_out * k));  // [n_out, k]
  FloatsToBf16(data, bf16.size(), bf16.data());
  return FromBf16(bf16.data(), n_out, k);
}

absl::Status PackedBf16Weight::MatMul(const float* x, int64_t m, float* y,
                                      bool accumulate) const {
  return MatMulBf16(x, m, *this, y, accumulate);
}

size_t PackedBf16Weight::bytes() const { return impl_->bytes; }
bool PackedBf16Weight::packed_for_onednn() const { return impl_->packed.has_value(); }
bool PackedBf16Weight::runs_on_amx() const {
  if (!impl_->own.has_value() || !bf16_amx::Available()) return false;
  if (!impl_->own->tiles && !impl_->packed.has_value()) return false;  // bf16_avx512's own
  return impl_->own->tiles || bf16_kernel.load(std::memory_order_relaxed) == Bf16Kernel::kOwn;
}
bool PackedBf16Weight::runs_on_avx512_bf16() const {
  if (!impl_->own.has_value() || impl_->own->tiles) return false;
  if (!impl_->packed.has_value()) return true;  // the kernel's own blocks: only it reads them
  const Bf16Kernel kernel = bf16_kernel.load(std::memory_order_relaxed);
  return kernel == Bf16Kernel::kAvx512Bf16 || (kernel == Bf16Kernel::kOwn && !runs_on_amx());
}
size_t PackedBf16Weight::num_cached_primitives() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->cache.size();
}

absl::Status MatMulBf16(const float* x, int64_t m, const PackedBf16Weight& w, float* y,
                        bool accumulate) {
  if (m < 0 || (m > 0 && (x == nullptr || y == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat("MatMulBf16: bad input, m = ", m));
  }
  if (w.impl_ == nullptr) return absl::FailedPreconditionError("MatMulBf16: moved-from weight");
  if (m == 0) return absl::OkStatus();
  try {
    ApplyThreadSetting();
    if (w.runs_on_amx()) {
      w.impl_->MatMulOwn(&bf16_amx::MatMulBlocks, x, m, y, accumulate);
      return absl::OkStatus();
    }
    if (w.runs_on_avx512_bf16()) {
      w.impl_->MatMulOwn(&bf16_avx512::MatMulBlocks, x, m, y, accumulate);
      return absl::OkStatus();
    }
    return w.impl_->packed ? w.impl_->MatMulOneDnn(x, m, y, accumulate)
                           : w.impl_->MatMulAvx2(x, m, y, accumulate);
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN bf16 matmul: ", e.what()));
  }
}

void SetBf16GemmThreads(int threads) {
  bf16_gemm_threads.store(threads, std::memory_order_relaxed);
}

void SetBf16Kernel(Bf16Kernel kernel) { bf16_kernel.store(kernel, std::memory_order_relaxed); }

}  // namespace tpserve
