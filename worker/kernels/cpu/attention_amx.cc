#include "worker/kernels/cpu/attention_amx.h"

// GCC 12's AVX-512 intrinsics pass an undefined vector (_mm512_undefined, a
// self-initialised variable) to their masked builtins, which -W(maybe-)uninitialized
// reports at every inlined use; nothing in this file reads an uninitialised value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "worker/dtype.h"
#include "worker/kernels/cpu/bf16_amx.h"
#include "worker/kernels/cpu/scratch.h"
#include "worker/kernels/cpu/transpose_avx512.h"

namespace tpserve {
namespace attention_amx {
namespace {

constexpr int64_t kRows = kQueryRowsPerTile;
constexpr int64_t kPairCols = 32;   // bf16 values along k per tile row (64 bytes)
constexpr int64_t kPosTile = 16;    // positions per score tile (a B tile's 16 columns)
constexpr int64_t kBlock = kPositionsPerBlock;
constexpr int64_t kScoreTiles = kBlock / kPosTile;  // 4: tiles 4..7
constexpr int64_t kValueSteps = kBlock / kPairCols;  // 2 k steps of P·V per block
static_assert(kScoreTiles == 4 && kValueSteps == 2);

int64_t RoundUp(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// One sequence's view for one kv head, in the tiles' layouts.
struct Shape {
  int64_t d_steps;        // ceil(d / 32): k steps of q·kᵀ
  int64_t value_tiles;    // ceil(dv / 16): 16-column tiles of the output
  int64_t blocks;         // position blocks from `base`
  int32_t base;           // first position of block 0 (a multiple of kBlock)
};

// keys -> [position tile][d step][16 pair rows][16 positions][2]: the B operand of q·kᵀ
// (16 positions as its 16 columns); values -> [32-position step][value tile][16 position
// pairs][16 columns][2]: the B operand of P·V. Positions outside [lo, context_len) and
// columns past d, dv are zeros. Every tile is written whole.

// One sequence's cache rows for the positions [base, base + span), found once per call:
// keys[i] and values[i] point at position base + i's slot row ([n_kv, d] and [n_kv, dv]
// bf16), null outside [lo, context_len). (Looking each row up through the block table
// and the cache's accessor, a division and a call a row, cost the gather more than its
// loads did.)
struct RowTable {
  const uint16_t* const* keys;
  const uint16_t* const* values;
  int32_t base;
  const uint16_t* Key(int32_t pos, int64_t head, int64_t d) const {
    const uint16_t* row = keys[pos - base];
    return row == nullptr ? nullptr : row + head * d;
  }
  const uint16_t* Value(int32_t pos, int64_t head, int64_t dv) const {
    const uint16_t* row = values[pos - base];
    return row == nullptr ? nullptr : row + head * dv;
  }
};

void FindRows(const SequenceStep& seq, const KvCache& cache, int layer, int32_t lo,
              int32_t base, int64_t span, const uint16_t** keys, const uint16_t** values) {
  const KvCacheShape& c = cache.shape();
  const int64_t key_row = int64_t{c.num_kv_heads} * c.head_dim;  // the cache's layout
  const int64_t value_row = int64_t{c.num_kv_heads} * c.v_head_dim;
  std::fill_n(keys, span, nullptr);
  std::fill_n(values, span, nullptr);
  const int32_t end = std::min<int64_t>(seq.context_len, base + span);
  for (int32_t pos = std::max(lo, base); pos < end;) {  // a cache block at a time
    const int32_t block = pos / c.block_size;
    const int64_t slot = seq.SlotOf(pos, c.block_size);
    const uint16_t* k = cache.key_bf16(layer, slot);
    const uint16_t* v = cache.value_bf16(layer, slot);
    const int32_t stop = std::min(end, (block + 1) * c.block_size);
    for (int64_t i = 0; pos < stop; ++pos, ++i) {
      keys[pos - base] = k + i * key_row;
      values[pos - base] = v + i * value_row;
    }
  }
}

// Mask of the first n of 32 bf16 lanes (n clamped to [0, 32]).
__mmask32 FirstLanes(int64_t n) {
  return n >= 32 ? 0xffffffffu : n <= 0 ? 0u : (__mmask32{1} << n) - 1;
}

// Asks for the cache lines of a run of positions' rows (the keys, then the values, of kv
// heads [kv_begin, kv_end)), in order: every line up to a position (IssueAll, as the
// prompt's gather does a few tiles ahead), or a few lines at a time (Issue, from calls
// spread through a decode block's work: a batch of decodes reads every context from
// memory each step, and asking for a block's lines all at once filled the line-fill
// buffers and held up the work until they arrived, so reads and tiles did not overlap).
class RowPrefetcher {
 public:
  RowPrefetcher(const RowTable& rows, int64_t kv_begin, int64_t kv_end, int64_t d, int64_t dv,
                int32_t first)
      : rows_(rows),
        kv_begin_(kv_begin),
        key_bytes_((kv_end - kv_begin) * d * 2),
        value_bytes_((kv_end - kv_begin) * dv * 2),
        d_(d),
        dv_(dv),
        pos_(first) {}

  // Positions before `end` are asked for by later calls.
  void SetEnd(int32_t end) { end_ = end; }
  // Up to `lines` lines.
  inline __attribute__((always_inline)) void Issue(int64_t lines) {
    for (; lines > 0; --lines) {
      if (next_ == stop_ && !NextRun()) return;
      _mm_prefetch(next_, _MM_HINT_T0);
      next_ += 64;
    }
  }
  // Every line of the positions before `end` not yet asked for.
  void IssueAll(int32_t end) {
    end_ = std::max(end_, end);
    while (pos_ < end || next_ != stop_) {
      if (next_ == stop_ && !NextRun()) return;
      _mm_prefetch(next_, _MM_HINT_T0);
      next_ += 64;
    }
  }

 private:
  // The next run of lines (a position's keys, then its values); false past end_.
  bool NextRun() {
    for (;;) {
      if (pos_ >= end_) return false;
      const uint16_t* p = values_next_ ? rows_.Value(pos_, kv_begin_, dv_)
                                       : rows_.Key(pos_, kv_begin_, d_);
      const int64_t bytes = values_next_ ? value_bytes_ : key_bytes_;
      if (values_next_) ++pos_;
      values_next_ = !values_next_;
      if (p == nullptr) continue;
      const uintptr_t a = reinterpret_cast<uintptr_t>(p);
      next_ = reinterpret_cast<const char*>(a & ~uintptr_t{63});
      stop_ = reinterpret_cast<const char*>(((a + bytes + 63) & ~uintptr_t{63}));
      return true;
    }
  }

  const RowTable& rows_;
  const int64_t kv_begin_, key_bytes_, value_bytes_, d_, dv_;
  int32_t pos_;                 // the position whose lines come next
  int32_t end_ = 0;
  bool values_next_ = false;    // pos_'s keys done
  const char* next_ = nullptr;  // the next line of the current run, stop_ past its last
  const char* stop_ = nullptr;
};

// How many 16-position tiles ahead GatherKv asks for the cache's rows. A cache block
// (block_size slots) is its own page, wherever the block table puts it, so the hardware's
// stream prefetchers, which stop at page ends, miss the first lines of every block; a
// decode step reads each sequence's whole context from memory once. In a batch-32 decode
// profile (128-278 positions) the gather took 17% as many samples as the GEMM kernel
// without this, 12% with it (2 and 4 tiles ahead: the same; with a decode's kv heads
// gathered in one pass, 1 to 4 tiles ahead timed alike, none slower).
constexpr int64_t kPrefetchTiles = 4;

// Elements of one kv head's keys and values in GatherKv's layouts.
int64_t HeadKeyElems(const Shape& s) { return s.blocks * kBlock * s.d_steps * kPairCols; }
int64_t HeadValueElems(const Shape& s) { return s.blocks * kBlock * s.value_tiles * 16; }

// Values of kv heads [kv_begin, kv_end) for the 32-position steps [ks_begin, ks_end) from
// s.base, in GatherKv's layout: step ks of head h at values + (h − kv_begin) · head_values +
// (ks − ks_begin) · value_tiles · 512 (zeros outside the rows' window, past dv).
__attribute__((target("avx512f,avx512bw,avx512vl"))) void GatherValueSteps(
    const RowTable& rows, int64_t kv_begin, int64_t kv_end, int64_t dv, const Shape& s,
    int64_t ks_begin, int64_t ks_end, uint16_t* values, int64_t head_values) {
  // Lane 2i of a tile row takes position 2r's column i of the tile, lane 2i + 1 position
  // 2r + 1's: from 32 columns of each (lanes 0-31 one, 32-63 the other), two tiles' rows.
  alignas(64) uint16_t interleave[2][32];
  for (int i = 0; i < 16; ++i) {
    for (int half = 0; half < 2; ++half) {
      interleave[half][2 * i] = static_cast<uint16_t>(16 * half + i);
      interleave[half][2 * i + 1] = static_cast<uint16_t>(32 + 16 * half + i);
    }
  }
  const __m512i low = _mm512_load_si512(interleave[0]);
  const __m512i high = _mm512_load_si512(interleave[1]);
  for (int64_t ks = ks_begin; ks < ks_end; ++ks) {  // 32 positions
    const int32_t pos0 = s.base + static_cast<int32_t>(ks * kPairCols);
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t h = kv_begin; h < kv_end; ++h) {
        const uint16_t* even = rows.Value(pos0 + 2 * r, h, dv);
        const uint16_t* odd = rows.Value(pos0 + 2 * r + 1, h, dv);
        uint16_t* dst = values + (h - kv_begin) * head_values +
                        ((ks - ks_begin) * s.value_tiles * kRows + r) * kPairCols;
        for (int64_t c = 0; c < s.value_tiles; c += 2) {  // 32 columns
          const __mmask32 lanes = FirstLanes(dv - c * 16);
          const __m512i a = even == nullptr ? _mm512_setzero_si512()
                                            : _mm512_maskz_loadu_epi16(lanes, even + c * 16);
          const __m512i b = odd == nullptr ? _mm512_setzero_si512()
                                           : _mm512_maskz_loadu_epi16(lanes, odd + c * 16);
          const int64_t tile = kRows * kPairCols;
          _mm512_store_si512(dst + c * tile, _mm512_permutex2var_epi16(a, low, b));
          if (c + 1 < s.value_tiles) {
            _mm512_store_si512(dst + (c + 1) * tile, _mm512_permutex2var_epi16(a, high, b));
          }
        }
      }
    }
  }
}

// Kv heads [kv_begin, kv_end) in one pass over the rows, head h's keys at keys + (h −
// kv_begin) · HeadKeyElems(s), its values likewise: a position's heads are adjacent in its
// cache row, so the pass reads whole rows in order, as the hardware prefetchers like.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void GatherKv(
    const RowTable& rows, int64_t kv_begin, int64_t kv_end, int64_t d, int64_t dv,
    const Shape& s, uint16_t* keys, uint16_t* values) {
  const int64_t tile = kRows * kPairCols;
  const int64_t position_tiles = s.blocks * kScoreTiles;
  const int64_t head_keys = HeadKeyElems(s), head_values = HeadValueElems(s);
  // The values are read after every key tile; their rows are asked for with the keys',
  // kPrefetchTiles tiles ahead.
  RowPrefetcher prefetch(rows, kv_begin, kv_end, d, dv, s.base);
  const auto tile_end = [&](int64_t pt) {  // the end of position tile pt (clamped)
    return s.base + static_cast<int32_t>(std::min(pt + 1, position_tiles) * kPosTile);
  };
  prefetch.IssueAll(tile_end(kPrefetchTiles - 1));
  for (int64_t pt = 0; pt < position_tiles; ++pt) {  // 16 positions
    prefetch.IssueAll(tile_end(pt + kPrefetchTiles));
    const int32_t pos0 = s.base + static_cast<int32_t>(pt * kPosTile);
    for (int64_t h = kv_begin; h < kv_end; ++h) {
      const uint16_t* src[kPosTile];
      for (int64_t j = 0; j < kPosTile; ++j) src[j] = rows.Key(pos0 + j, h, d);
      for (int64_t ds = 0; ds < s.d_steps; ++ds) {
        const __mmask32 lanes = FirstLanes(d - ds * kPairCols);
        __m512i in[16], out[16];
        for (int64_t j = 0; j < kPosTile; ++j) {
          in[j] = src[j] == nullptr ? _mm512_setzero_si512()
                                    : _mm512_maskz_loadu_epi16(lanes, src[j] + ds * kPairCols);
        }
        Transpose16(in, out);  // out[r]: pair r of the 16 positions
        uint16_t* dst = keys + (h - kv_begin) * head_keys + (pt * s.d_steps + ds) * tile;
        for (int r = 0; r < 16; ++r) _mm512_store_si512(dst + r * kPairCols, out[r]);
      }
    }
  }
  GatherValueSteps(rows, kv_begin, kv_end, dv, s, 0, s.blocks * kValueSteps, values,
                   head_values);
}

// The largest lane of four vectors, and the sum of one's lanes (GCC's fixed shuffle trees).
inline __attribute__((always_inline, target("avx512f"))) float MaxOf(__m512 a, __m512 b,
                                                                     __m512 c, __m512 d) {
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(a, b), _mm512_max_ps(c, d)));
}
inline __attribute__((always_inline, target("avx512f"))) float SumOf(__m512 a) {
  return _mm512_reduce_add_ps(a);
}

// e^x of 16 lanes by vec_math's method (x = n·ln2 + r, a degree-7 polynomial in r, 2^n
// through the exponent bits; 0 at or below -87, e^88.3 above 88.3, NaN kept), in AVX-512.
inline __attribute__((always_inline, target("avx512f"))) __m512 Exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.0f);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __m512 c = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.3f));
  const __m512 t = _mm512_mul_ps(c, _mm512_set1_ps(1.44269504088896341f));
  const __m512 half = _mm512_castsi512_ps(_mm512_or_si512(
      _mm512_and_si512(_mm512_castps_si512(t), _mm512_set1_epi32(INT32_MIN)),
      _mm512_castps_si512(_mm512_set1_ps(0.5f))));  // ±0.5, t's sign: round half away
  const __m512i n = _mm512_cvttps_epi32(_mm512_add_ps(t, half));
  const __m512 nf = _mm512_cvtepi32_ps(n);
  __m512 r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(0.693145751953125f), c);
  r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 poly = _mm512_set1_ps(1.0f / 5040);
  // Unrolled: as a loop GCC 12 kept the coefficients in memory and the loop's own counter
  // in the chain (11% of the softmax's samples sat on that counter's add).
#pragma GCC unroll 8
  for (const float k : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}) {
    poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(k));
  }
  const __m512i bits = _mm512_add_epi32(_mm512_castps_si512(poly), _mm512_slli_epi32(n, 23));
  __m512 out = _mm512_castsi512_ps(bits);
  out = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(c, lo, _CMP_LE_OQ), out, _mm512_setzero_ps());
  return _mm512_mask_blend_ps(nan, out, x);
}

// The running state of one tile's query rows.
struct RowState {
  float max[kRows];                      // of the scaled scores seen, -inf before any
  float sum[kRows];                      // of the bf16 weights, relative to max
  float alpha[kRows];                    // this block's e^(max_old − max_new)
  alignas(64) float scores[kRows * kBlock];      // [16 rows][64 positions]
  alignas(64) float scores_t[kBlock * kRows];    // [64 positions][16 rows] (KeyTiles)
  alignas(64) uint16_t weights[kRows * kBlock];  // bf16 [16 rows][64 positions]
};

// Scores of one block -> the rows' weights (bf16) and running max and sum. Row r sees
// positions [lo[r], pos[r]]; the others, and rows past `rows`, get weight 0 and alpha 1.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void Softmax(
    RowState& st, int64_t rows, int32_t block_first, const int32_t* lo, const int32_t* pos,
    float scale, RowPrefetcher* prefetch, int64_t prefetch_lines) {
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  // First each row's scaled, masked scores (back in place) and new max; then the rows'
  // e^(max_old − max_new) 16 lanes at once (a row's lane is the value it had alone: Exp16
  // is lane by lane); then the weights and sums.
  alignas(64) float old_max[kRows], new_max[kRows];
  __mmask16 rescale = 0;  // rows whose max moved from a finite one
  __mmask16 skip = 0;     // rows with no weight in this block: weights 0, state kept
  for (int64_t r = 0; r < kRows; ++r) {
    old_max[r] = st.max[r];
    new_max[r] = st.max[r];
    const int32_t first = r < rows ? std::max(lo[r] - block_first, 0) : kBlock;
    const int32_t last = r < rows ? std::min<int32_t>(pos[r] - block_first, kBlock - 1) : -1;
    if (first > last) {  // nothing of this block in the row's window
      skip |= __mmask16{1} << r;
      continue;
    }
    const bool whole = first == 0 && last == kBlock - 1;  // most blocks of a long context
    __m512 s[4];
    float* row = st.scores + r * kBlock;
    for (int q = 0; q < 4; ++q) {
      s[q] = _mm512_mul_ps(_mm512_load_ps(row + 16 * q), _mm512_set1_ps(scale));
      if (!whole) {
        const __m512 col = _mm512_add_ps(iota, _mm512_set1_ps(static_cast<float>(16 * q)));
        const __mmask16 in = _mm512_cmp_ps_mask(col, _mm512_set1_ps(static_cast<float>(first)),
                                                _CMP_GE_OQ) &
                             _mm512_cmp_ps_mask(col, _mm512_set1_ps(static_cast<float>(last)),
                                                _CMP_LE_OQ);
        s[q] = _mm512_mask_blend_ps(in, neg_inf, s[q]);
      }
      _mm512_store_ps(row + 16 * q, s[q]);
    }
    const float m = std::max(st.max[r], MaxOf(s[0], s[1], s[2], s[3]));
    if (!(m > -INFINITY)) {  // every score -inf (or NaN): weights 0, state kept
      skip |= __mmask16{1} << r;
      continue;
    }
    if (st.max[r] > -INFINITY && m != st.max[r]) rescale |= __mmask16{1} << r;
    new_max[r] = m;
    st.max[r] = m;
  }
  // alpha = e^0 = 1 exactly where the max did not move (or there was none before).
  const __m512 moved = Exp16(_mm512_sub_ps(_mm512_load_ps(old_max), _mm512_load_ps(new_max)));
  _mm512_storeu_ps(st.alpha, _mm512_mask_blend_ps(rescale, _mm512_set1_ps(1.0f), moved));
  for (int64_t r = 0; r < kRows; ++r) {
    if (prefetch != nullptr) prefetch->Issue(prefetch_lines);
    uint16_t* w = st.weights + r * kBlock;
    if ((skip >> r) & 1) {
      std::memset(w, 0, kBlock * sizeof(uint16_t));
      continue;
    }
    const float* row = st.scores + r * kBlock;
    const __m512 m = _mm512_set1_ps(new_max[r]);
    __m512 total = _mm512_setzero_ps();
    for (int q = 0; q < 4; q += 2) {
      const __m512 a = Exp16(_mm512_sub_ps(_mm512_load_ps(row + 16 * q), m));
      const __m512 b = Exp16(_mm512_sub_ps(_mm512_load_ps(row + 16 * q + 16), m));
      const __m512i pair = (__m512i)_mm512_cvtne2ps_pbh(b, a);  // a low, b high
      _mm512_store_si512(w + 16 * q, pair);
      // The sum of the weights as rounded: bf16 widens exactly by a 16-bit shift.
      const __m512 ra = _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(pair)), 16));
      const __m512 rb = _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(pair, 1)), 16));
      total = _mm512_add_ps(total, _mm512_add_ps(ra, rb));
    }
    st.sum[r] = st.sum[r] * st.alpha[r] + SumOf(total);
  }
}

// The keys read where they lie in the cache, not gathered: tile[t] is the first row of
// the 16 positions of tile t (from Shape::base), each position's row `stride` bytes after
// the one before, head h's keys at h · d elements into a row. A tile with no position in
// the sequence's window points at one that has (its scores are masked off all the same).
struct KeyTiles {
  const uint16_t* const* tile;
  int64_t stride;  // bytes
  int64_t head;    // elements from a row's start to the call's head
};

// The 16 x 16 fp32 tile at `in` (rows 64 bytes apart) transposed into `out`, whose rows
// are `out_stride` floats apart.
__attribute__((target("avx512f"))) void TransposeTile(const float* in, float* out,
                                                      int64_t out_stride) {
  __m512i rows[16], cols[16];
  for (int j = 0; j < 16; ++j) rows[j] = _mm512_load_si512(in + 16 * j);
  Transpose16(rows, cols);
  for (int r = 0; r < 16; ++r) _mm512_store_si512(out + r * out_stride, cols[r]);
}

// One tile of query rows against block b (positions s.base + 64·b on): its scores, the
// softmax's step, O = O · alpha + P · V. q_tiles: [d step][16 rows][32] bf16; out: [16
// rows][value_tiles · 16] fp32; block_keys, block_values: the block's in GatherKv's
// layouts. With `cached.tile` set, the scores come from the keys in the cache (KeyTiles)
// as sᵀ = k · qᵀ, qt_tiles ([d step][16 pairs][16 rows][2], q_tiles transposed) the B
// operand, and are transposed back: each score is the same sum of the same products in
// the same order as q · kᵀ's, so not a bit moves; block_keys is then unused. The softmax
// asks `prefetch` (none when null) for prefetch_lines lines a row.
__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16"))) void AttendBlock(
    const uint16_t* q_tiles, const uint16_t* qt_tiles, const uint16_t* block_keys,
    KeyTiles cached, const uint16_t* block_values, const Shape& s, int64_t b, int64_t rows,
    const int32_t* lo, const int32_t* pos, float scale, RowState& st, float* out,
    float* block_out, RowPrefetcher* prefetch, int64_t prefetch_lines) {
  const int64_t out_cols = s.value_tiles * 16;
  const int64_t key_tile_elems = kRows * kPairCols;
  // Scores: tiles 4..7 = q · kᵀ for the block's four 16-position tiles.
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  if (cached.tile != nullptr) {  // tiles 4..7 = k · qᵀ, [16 positions][16 rows] each
    const uint16_t* const* tile = cached.tile + b * kScoreTiles;
    for (int64_t ds = 0; ds < s.d_steps; ++ds) {
      const int64_t at = cached.head + ds * kPairCols;
      _tile_loadd(2, qt_tiles + ds * key_tile_elems, kPairCols * sizeof(uint16_t));
      _tile_loadd(0, tile[0] + at, cached.stride);
      _tile_dpbf16ps(4, 0, 2);
      _tile_loadd(1, tile[1] + at, cached.stride);
      _tile_dpbf16ps(5, 1, 2);
      _tile_loadd(0, tile[2] + at, cached.stride);
      _tile_dpbf16ps(6, 0, 2);
      _tile_loadd(1, tile[3] + at, cached.stride);
      _tile_dpbf16ps(7, 1, 2);
    }
    const int64_t stride = kRows * sizeof(float);
    _tile_stored(4, st.scores_t, stride);
    _tile_stored(5, st.scores_t + 16 * kRows, stride);
    _tile_stored(6, st.scores_t + 32 * kRows, stride);
    _tile_stored(7, st.scores_t + 48 * kRows, stride);
    for (int64_t t = 0; t < kScoreTiles; ++t) {
      TransposeTile(st.scores_t + t * kPosTile * kRows, st.scores + t * kPosTile, kBlock);
    }
  } else {
    for (int64_t ds = 0; ds < s.d_steps; ++ds) {
      _tile_loadd(0, q_tiles + ds * key_tile_elems, kPairCols * sizeof(uint16_t));
      const uint16_t* k = block_keys + ds * key_tile_elems;
      const int64_t next_tile = s.d_steps * key_tile_elems;  // the next 16 positions
      _tile_loadd(2, k, kPairCols * sizeof(uint16_t));
      _tile_dpbf16ps(4, 0, 2);
      _tile_loadd(3, k + next_tile, kPairCols * sizeof(uint16_t));
      _tile_dpbf16ps(5, 0, 3);
      _tile_loadd(2, k + 2 * next_tile, kPairCols * sizeof(uint16_t));
      _tile_dpbf16ps(6, 0, 2);
      _tile_loadd(3, k + 3 * next_tile, kPairCols * sizeof(uint16_t));
      _tile_dpbf16ps(7, 0, 3);
    }
    const int64_t score_stride = kBlock * sizeof(float);
    _tile_stored(4, st.scores, score_stride);
    _tile_stored(5, st.scores + 16, score_stride);
    _tile_stored(6, st.scores + 32, score_stride);
    _tile_stored(7, st.scores + 48, score_stride);
  }
  Softmax(st, rows, s.base + static_cast<int32_t>(b * kBlock), lo, pos, scale, prefetch,
          prefetch_lines);

  // O_block = P · V, four 16-column tiles at a time, then O = O · alpha + O_block.
  for (int64_t c0 = 0; c0 < s.value_tiles; c0 += 4) {
    const int64_t n = std::min<int64_t>(4, s.value_tiles - c0);
    _tile_zero(4);
    if (n > 1) _tile_zero(5);
    if (n > 2) _tile_zero(6);
    if (n > 3) _tile_zero(7);
    for (int64_t ks = 0; ks < kValueSteps; ++ks) {
      _tile_loadd(0, st.weights + ks * kPairCols, kBlock * sizeof(uint16_t));
      const uint16_t* v = block_values + (ks * s.value_tiles + c0) * key_tile_elems;
      _tile_loadd(2, v, kPairCols * sizeof(uint16_t));
      _tile_dpbf16ps(4, 0, 2);
      if (n > 1) {
        _tile_loadd(3, v + key_tile_elems, kPairCols * sizeof(uint16_t));
        _tile_dpbf16ps(5, 0, 3);
      }
      if (n > 2) {
        _tile_loadd(2, v + 2 * key_tile_elems, kPairCols * sizeof(uint16_t));
        _tile_dpbf16ps(6, 0, 2);
      }
      if (n > 3) {
        _tile_loadd(3, v + 3 * key_tile_elems, kPairCols * sizeof(uint16_t));
        _tile_dpbf16ps(7, 0, 3);
      }
    }
    const int64_t stride = out_cols * sizeof(float);
    float* dst = block_out + c0 * 16;
    _tile_stored(4, dst, stride);
    if (n > 1) _tile_stored(5, dst + 16, stride);
    if (n > 2) _tile_stored(6, dst + 32, stride);
    if (n > 3) _tile_stored(7, dst + 48, stride);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const __m512 alpha = _mm512_set1_ps(st.alpha[r]);
    float* o = out + r * out_cols;
    const float* ob = block_out + r * out_cols;
    for (int64_t c = 0; c < out_cols; c += 16) {
      _mm512_storeu_ps(o + c, _mm512_fmadd_ps(_mm512_loadu_ps(o + c), alpha,
                                              _mm512_loadu_ps(ob + c)));
    }
  }
}

// One tile of query rows against the blocks [block_begin, block_end): AttendBlock on each,
// keys and values in GatherKv's layouts.
__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16"))) void AttendTile(
    const uint16_t* q_tiles, const uint16_t* keys, const uint16_t* values, const Shape& s,
    int64_t block_begin, int64_t block_end, int64_t rows, const int32_t* lo, const int32_t* pos,
    float scale, RowState& st, float* out, float* block_out) {
  const int64_t key_tile_elems = kRows * kPairCols;
  for (int64_t r = 0; r < kRows; ++r) {
    st.max[r] = -INFINITY;
    st.sum[r] = 0.0f;
  }
  for (int64_t b = block_begin; b < block_end; ++b) {
    AttendBlock(q_tiles, nullptr, keys + b * kScoreTiles * s.d_steps * key_tile_elems,
                KeyTiles{nullptr, 0, 0}, values + b * kValueSteps * s.value_tiles * key_tile_elems,
                s, b, rows, lo, pos, scale, st, out, block_out, nullptr, 0);
  }
}

// dst[c] = src[c] · scale for c < n (16 lanes at a time: the same products as one by one).
__attribute__((target("avx512f"))) void Scale(const float* src, int64_t n, float scale,
                                               float* dst) {
  const __m512 factor = _mm512_set1_ps(scale);
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 lanes = static_cast<__mmask16>(FirstLanes(n - c));
    _mm512_mask_storeu_ps(dst + c, lanes,
                          _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, src + c), factor));
  }
}

// One tile of a call's query rows: rows [r0, r0 + rows) of kv head kv_head, their
// positions and windows, the blocks they see, and their softmax's running max and sum.
struct QueryTile {
  int64_t kv_head, r0, rows, block_begin, block_end;
  int32_t lo[kRows], pos[kRows];
  float max[kRows], sum[kRows];
};

// How many blocks past the one being worked on a decode asks for the rows of.
constexpr int64_t kPrefetchBlocks = 1;

// KeyTiles::tile for the positions [s.base, s.base + span) of `rows` (FindRows'), or false
// when some tile's positions are not one run of rows in the cache (a cache block size not a
// multiple of 16) or a row holds more than the head's keys in a tile's 64 bytes (d not a
// multiple of 32: the next head's keys would be multiplied by the zeros past d).
bool FindKeyTiles(const RowTable& rows, int64_t span, int64_t d, const KvCacheShape& c,
                  const uint16_t** tiles) {
  if (d % kPairCols != 0 || c.block_size % kPosTile != 0) return false;
  const uint16_t* any = nullptr;  // a tile's rows that are in the cache
  const int64_t key_row = int64_t{c.num_kv_heads} * c.head_dim;
  for (int64_t t = 0; t * kPosTile < span; ++t) {
    tiles[t] = nullptr;
    // Tiles start at multiples of 16 (base is a multiple of 64), so with the block size a
    // multiple of 16 each lies in one cache block, its rows key_row apart from any of them.
    for (int64_t j = 0; j < kPosTile; ++j) {
      const uint16_t* row = rows.keys[t * kPosTile + j];
      if (row != nullptr) {
        tiles[t] = row - j * key_row;
        any = tiles[t];
        break;
      }
    }
  }
  for (int64_t t = 0; t * kPosTile < span; ++t) {
    if (tiles[t] == nullptr) tiles[t] = any;  // never null: a sequence has a position
  }
  return any != nullptr;
}

// q_tiles' d steps transposed, 32-bit pairs as elements: [d step][16 pairs][16 rows][2].
__attribute__((target("avx512f"))) void TransposeQuery(const uint16_t* q_tiles, int64_t d_steps,
                                                       uint16_t* qt_tiles) {
  for (int64_t ds = 0; ds < d_steps; ++ds) {
    __m512i rows[16], pairs[16];
    const uint16_t* in = q_tiles + ds * kRows * kPairCols;
    for (int r = 0; r < 16; ++r) rows[r] = _mm512_load_si512(in + r * kPairCols);
    Transpose16(rows, pairs);
    uint16_t* out = qt_tiles + ds * kRows * kPairCols;
    for (int p = 0; p < 16; ++p) _mm512_store_si512(out + p * kPairCols, pairs[p]);
  }
}

std::atomic<bool> keys_from_cache{true};

}  // namespace

bool Available() { return bf16_amx::Available(); }

void SetKeysFromCache(bool on) { keys_from_cache.store(on, std::memory_order_relaxed); }

void AttendSequence(const float* q, const SequenceStep& seq, int64_t t0, int64_t kv_begin,
                    int64_t kv_end, const KvCache& cache, int layer, const AttentionParams& p,
                    float* out) {
  const int64_t group = p.num_heads / p.num_kv_heads;
  const int64_t d = p.head_dim, dv = p.v_head_dim;
  const int32_t first_pos = seq.context_len - seq.num_new_tokens;
  const int32_t window = p.sliding_window;
  const int32_t lo_all = window > 0 ? std::max(0, first_pos - window + 1) : 0;
  Shape s;
  s.d_steps = RoundUp(d, kPairCols) / kPairCols;
  s.value_tiles = RoundUp(dv, 16) / 16;
  s.base = lo_all / kBlock * kBlock;
  s.blocks = RoundUp(seq.context_len - s.base, kBlock) / kBlock;
  const int64_t out_cols = s.value_tiles * 16;

  thread_local Scratch<uint16_t> key_buf, value_buf, q_buf;
  thread_local Scratch<float> out_buf, block_out_buf;
  float* block_out = block_out_buf.Get(kRows * out_cols);
  thread_local RowState st;
  const int64_t span = s.blocks * kBlock;
  thread_local Scratch<const uint16_t*> key_row_buf, value_row_buf, key_tile_buf;
  const uint16_t** key_rows = key_row_buf.Get(span);
  const uint16_t** value_rows = value_row_buf.Get(span);
  FindRows(seq, cache, layer, lo_all, s.base, span, key_rows, value_rows);
  const RowTable table{key_rows, value_rows, s.base};
  const int64_t num_rows = int64_t{seq.num_new_tokens} * group;  // row = token · G + g
  // A decode's keys are read where they lie in the cache: gathering them (a transpose a
  // 16 x 32 piece) cost more than transposing its one or two tiles of scores back. A
  // prompt's many query tiles share one gather.
  KeyTiles cached{nullptr, 0, 0};
  const uint16_t** key_tiles = key_tile_buf.Get(span / kPosTile);
  if (num_rows <= 2 * kRows && keys_from_cache.load(std::memory_order_relaxed) &&
      FindKeyTiles(table, span, d, cache.shape(), key_tiles)) {
    const int64_t key_row = int64_t{cache.shape().num_kv_heads} * cache.shape().head_dim;
    cached = KeyTiles{key_tiles, key_row * static_cast<int64_t>(sizeof(uint16_t)), 0};
  }
  // Query tiles, 16 rows each: row r0 + r of kv head h is (token, query head) = ((r0 + r) /
  // G, h · G + (r0 + r) % G). Rows are in position order, the first seeing from the lowest.
  const int64_t tiles_per_head = (num_rows + kRows - 1) / kRows;
  const int64_t units = (kv_end - kv_begin) * tiles_per_head;
  const int64_t q_elems = s.d_steps * kRows * kPairCols;
  thread_local std::vector<QueryTile> unit_store;
  unit_store.resize(units);
  thread_local Scratch<uint16_t> qt_buf;
  uint16_t* q_tiles = q_buf.Get(units * q_elems);
  uint16_t* qt_tiles = qt_buf.Get(units * q_elems);
  float* tile_out = out_buf.Get(units * kRows * out_cols);
  std::memset(tile_out, 0, units * kRows * out_cols * sizeof(float));
  std::memset(q_tiles, 0, units * q_elems * sizeof(uint16_t));
  for (int64_t u = 0; u < units; ++u) {
    QueryTile& t = unit_store[u];
    t.kv_head = kv_begin + u / tiles_per_head;
    t.r0 = u % tiles_per_head * kRows;
    t.rows = std::min(kRows, num_rows - t.r0);
    for (int64_t r = 0; r < t.rows; ++r) {
      const int64_t token = (t.r0 + r) / group, head = t.kv_head * group + (t.r0 + r) % group;
      t.pos[r] = first_pos + static_cast<int32_t>(token);
      t.lo[r] = window > 0 ? std::max(0, t.pos[r] - window + 1) : 0;
      const float* q_head = q + ((t0 + token) * p.num_heads + head) * d;
      for (int64_t ds = 0; ds < s.d_steps; ++ds) {  // columns past d stay zero
        FloatsToBf16(q_head + ds * kPairCols, std::min(kPairCols, d - ds * kPairCols),
                     q_tiles + u * q_elems + (ds * kRows + r) * kPairCols);
      }
    }
    t.block_begin = (t.lo[0] - s.base) / kBlock;
    t.block_end = (t.pos[t.rows - 1] - s.base) / kBlock + 1;
    for (int64_t r = 0; r < kRows; ++r) {
      t.max[r] = -INFINITY;
      t.sum[r] = 0.0f;
    }
    if (cached.tile != nullptr) {
      TransposeQuery(q_tiles + u * q_elems, s.d_steps, qt_tiles + u * q_elems);
    }
  }
  bf16_amx::ConfigureTiles();
  if (cached.tile == nullptr) {
    uint16_t* keys = key_buf.Get((kv_end - kv_begin) * HeadKeyElems(s));
    uint16_t* values = value_buf.Get((kv_end - kv_begin) * HeadValueElems(s));
    GatherKv(table, kv_begin, kv_end, d, dv, s, keys, values);
    for (int64_t u = 0; u < units; ++u) {
      const QueryTile& t = unit_store[u];
      AttendTile(q_tiles + u * q_elems, keys + (t.kv_head - kv_begin) * HeadKeyElems(s),
                 values + (t.kv_head - kv_begin) * HeadValueElems(s), s, t.block_begin,
                 t.block_end, t.rows, t.lo, t.pos, p.scale, st, tile_out + u * kRows * out_cols,
                 block_out);
      std::copy_n(st.sum, kRows, unit_store[u].sum);
    }
  } else {
    // A decode: every tile over the blocks together, a block at a time (a tile's rows are
    // left bit for bit as they were by blocks they do not see, so the union of the tiles'
    // ranges is theirs). Each block's values are gathered, then each tile takes the block
    // (its keys read from the cache), while its softmax asks for the rows of the next
    // block a few lines a row, so that memory works while the tiles do.
    int64_t block_begin = s.blocks, block_end = 0;
    for (int64_t u = 0; u < units; ++u) {
      block_begin = std::min(block_begin, unit_store[u].block_begin);
      block_end = std::max(block_end, unit_store[u].block_end);
    }
    const int64_t head_block_values = kValueSteps * s.value_tiles * kRows * kPairCols;
    uint16_t* block_values = value_buf.Get((kv_end - kv_begin) * head_block_values);
    const int32_t span_end = s.base + static_cast<int32_t>(span);
    RowPrefetcher prefetch(table, kv_begin, kv_end, d, dv,
                           s.base + static_cast<int32_t>(block_begin * kBlock));
    const int64_t lines_per_block = kBlock * ((kv_end - kv_begin) * (d + dv) * 2 / 64 + 2);
    const int64_t lines_per_row = (lines_per_block + units * kRows - 1) / (units * kRows);
    for (int64_t b = block_begin; b < block_end; ++b) {
      const int32_t block_end_pos = s.base + static_cast<int32_t>((b + 1) * kBlock);
      prefetch.IssueAll(block_end_pos);  // this block's rows, if not asked for yet
      prefetch.SetEnd(std::min<int32_t>(span_end, block_end_pos + kPrefetchBlocks * kBlock));
      GatherValueSteps(table, kv_begin, kv_end, dv, s, b * kValueSteps, (b + 1) * kValueSteps,
                       block_values, head_block_values);
      for (int64_t u = 0; u < units; ++u) {
        QueryTile& t = unit_store[u];
        std::copy_n(t.max, kRows, st.max);
        std::copy_n(t.sum, kRows, st.sum);
        cached.head = t.kv_head * d;
        AttendBlock(q_tiles + u * q_elems, qt_tiles + u * q_elems, nullptr, cached,
                    block_values + (t.kv_head - kv_begin) * head_block_values, s, b, t.rows,
                    t.lo, t.pos, p.scale, st, tile_out + u * kRows * out_cols, block_out,
                    &prefetch, lines_per_row);
        std::copy_n(st.max, kRows, t.max);
        std::copy_n(st.sum, kRows, t.sum);
      }
    }
  }
  for (int64_t u = 0; u < units; ++u) {
    const QueryTile& t = unit_store[u];
    for (int64_t r = 0; r < t.rows; ++r) {
      const int64_t token = (t.r0 + r) / group, head = t.kv_head * group + (t.r0 + r) % group;
      float* dst = out + ((t0 + token) * p.num_heads + head) * dv;
      Scale(tile_out + (u * kRows + r) * out_cols, dv, 1.0f / t.sum[r], dst);
    }
  }
  bf16_amx::ReleaseTiles();
}

}  // namespace attention_amx
}  // namespace tpserve
