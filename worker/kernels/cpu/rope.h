// Rotary position embedding (HF "rotate_half" layout: element i pairs with i + d/2),
// with the none, linear, llama3, yarn and longrope frequency scalings (yarn and longrope
// also scale cos and sin by their attention factor). longrope has two frequency sets: a
// token rotates with the long one when its sequence is longer than the original context,
// as transformers decides per forward pass (UsesLongFactors).
//
// A RotaryEmbedding is built once per model and is read-only afterwards, so ranks and
// threads may share it.
#ifndef TPSERVE_WORKER_KERNELS_CPU_ROPE_H_
#define TPSERVE_WORKER_KERNELS_CPU_ROPE_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "worker/loader/hf_config.h"
#include "worker/step_batch.h"

namespace tpserve {

class RotaryEmbedding {
 public:
  // rotary_dim: the head dim (even). theta: rope_theta.
  RotaryEmbedding(int rotary_dim, double theta, const RopeScaling& scaling);

  // x: [n, num_heads, rotary_dim], rotated in place; positions: [n]. use_long: [n] or
  // empty (no token uses the long set; only longrope has one).
  void Apply(absl::Span<const int32_t> positions, int64_t num_heads, float* x,
             absl::Span<const uint8_t> use_long = {}) const;

  // Whether longrope's long set rotates the token at `position` of a sequence whose
  // prompt has `num_prompt_tokens` tokens. transformers rotates a whole forward pass with
  // the long set when its length exceeds original_max_position_embeddings: a prompt is
  // one pass (every prompt token decides by the prompt's length, however the prompt is
  // chunked here), and each generated token is its own pass (position + 1). False for
  // every other scaling.
  bool UsesLongFactors(int32_t position, int32_t num_prompt_tokens) const;
  // UsesLongFactors of every token of `batch`, in batch order: [num_tokens], or empty
  // without long factors.
  std::vector<uint8_t> LongFactorFlags(const StepBatch& batch) const;
  bool has_long_factors() const { return !long_inv_freq_.empty(); }

  // [max_positions, rotary_dim]: row p = [cos(p·f_0 .. p·f_{d/2-1}) | sin(...)], the
  // exact values Apply rotates with; the table the CUDA rope kernel reads. With long
  // factors, [2 · max_positions, rotary_dim]: row max_positions + p for the long set.
  std::vector<float> CosSinTable(int max_positions) const;

  // [rotary_dim / 2], after scaling.
  const std::vector<double>& inv_freq() const { return inv_freq_; }

 private:
  // cos_out, sin_out: [rotary_dim / 2] for one position; angles in double, cast to float.
  void CosSin(int32_t position, bool use_long, float* cos_out, float* sin_out) const;

  int rotary_dim_;
  std::vector<double> inv_freq_;
  std::vector<double> long_inv_freq_;  // longrope only
  int32_t long_threshold_ = 0;         // longrope: original_max_position_embeddings
  float attention_factor_;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_ROPE_H_
