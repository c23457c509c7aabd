// Rotary position embedding (HF "rotate_half" layout: element i pairs with i + d/2),
// with the none, linear, llama3 and yarn frequency scalings (yarn also scales cos and sin
// by its attention factor).
//
// A RotaryEmbedding is built once per model and is read-only afterwards, so ranks and
// threads may share it.
#ifndef TPSERVE_WORKER_KERNELS_CPU_ROPE_H_
#define TPSERVE_WORKER_KERNELS_CPU_ROPE_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "worker/loader/hf_config.h"

namespace tpserve {

class RotaryEmbedding {
 public:
  // rotary_dim: the head dim (even). theta: rope_theta.
  RotaryEmbedding(int rotary_dim, double theta, const RopeScaling& scaling);

  // x: [n, num_heads, rotary_dim], rotated in place; positions: [n].
  void Apply(absl::Span<const int32_t> positions, int64_t num_heads, float* x) const;

  // [max_positions, rotary_dim]: row p = [cos(p·f_0 .. p·f_{d/2-1}) | sin(...)], the
  // exact values Apply rotates with; the table the CUDA rope kernel reads.
  std::vector<float> CosSinTable(int max_positions) const;

  // [rotary_dim / 2], after scaling.
  const std::vector<double>& inv_freq() const { return inv_freq_; }

 private:
  // cos_out, sin_out: [rotary_dim / 2] for one position; angles in double, cast to float.
  void CosSin(int32_t position, float* cos_out, float* sin_out) const;

  int rotary_dim_;
  std::vector<double> inv_freq_;
  float attention_factor_;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_ROPE_H_
