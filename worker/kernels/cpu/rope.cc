#include "worker/kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>

#include "worker/kernels/cpu/cpu_threads.h"

namespace tpserve {
namespace {

// Llama 3.1's rescaling: keep high frequencies, divide low ones by `factor`, and blend
// in between by where the wavelength falls relative to the original context.
double Llama3Scale(double inv_freq, const RopeScaling& s) {
  const double old_context = s.original_max_position_embeddings;
  const double low_freq_wavelen = old_context / s.low_freq_factor;
  const double high_freq_wavelen = old_context / s.high_freq_factor;
  const double wavelen = 2.0 * M_PI / inv_freq;
  if (wavelen < high_freq_wavelen) return inv_freq;
  if (wavelen > low_freq_wavelen) return inv_freq / s.factor;
  const double smooth = (old_context / wavelen - s.low_freq_factor) /
                        (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * inv_freq / s.factor + smooth * inv_freq;
}

// YaRN as transformers' _compute_yarn_parameters (fp32 where torch computes in fp32):
// frequency i blends its interpolated (÷ factor) and extrapolated (as is) values by a
// linear ramp over the dimensions between the correction range of beta_fast and
// beta_slow rotations within the original context.
std::vector<double> YarnInvFreq(int dim, double base, const RopeScaling& s) {
  auto correction_dim = [&](double rotations) {
    return dim * std::log(s.original_max_position_embeddings / (rotations * 2 * M_PI)) /
           (2 * std::log(base));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // as transformers: no division by zero
  std::vector<double> out(dim / 2);
  for (int i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    const float pos_freq = static_cast<float>(std::pow(base, static_cast<double>(exponent)));
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (static_cast<float>(s.factor) * pos_freq);
    const float ramp = std::clamp(
        static_cast<float>((static_cast<float>(i) - low) / (high - low)), 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    out[i] = interpolation * (1.0f - extrapolation_factor) +
             extrapolation * extrapolation_factor;
  }
  return out;
}

// longrope as transformers: 1 / (ext_factor_i · base^(2i/d)), in fp32.
std::vector<double> LongRopeInvFreq(int dim, double base, const std::vector<double>& factors) {
  std::vector<double> out(dim / 2);
  for (int i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    const float pos_freq = static_cast<float>(std::pow(base, static_cast<double>(exponent)));
    out[i] = 1.0f / (static_cast<float>(factors[i]) * pos_freq);
  }
  return out;
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(int rotary_dim, double theta, const RopeScaling& scaling)
    : rotary_dim_(rotary_dim),
      inv_freq_(rotary_dim / 2),
      attention_factor_(scaling.type == RopeScaling::Type::kYarn ||
                                scaling.type == RopeScaling::Type::kLongRope
                            ? scaling.attention_factor
                            : 1.0) {
  if (scaling.type == RopeScaling::Type::kYarn) {
    inv_freq_ = YarnInvFreq(rotary_dim, theta, scaling);
    return;
  }
  if (scaling.type == RopeScaling::Type::kLongRope) {
    inv_freq_ = LongRopeInvFreq(rotary_dim, theta, scaling.short_factor);
    long_inv_freq_ = LongRopeInvFreq(rotary_dim, theta, scaling.long_factor);
    long_threshold_ = scaling.original_max_position_embeddings;
    return;
  }
  for (int i = 0; i < rotary_dim / 2; ++i) {
    // HF computes the exponent in fp32; so does this, to land on the same frequencies.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    double f = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(exponent)));
    switch (scaling.type) {
      case RopeScaling::Type::kNone:
        break;
      case RopeScaling::Type::kLinear:
        f /= scaling.factor;
        break;
      case RopeScaling::Type::kLlama3:
        f = Llama3Scale(f, scaling);
        break;
      case RopeScaling::Type::kYarn:  // handled above
      case RopeScaling::Type::kLongRope:
        break;
    }
    inv_freq_[i] = f;
  }
}

bool RotaryEmbedding::UsesLongFactors(int32_t position, int32_t num_prompt_tokens) const {
  if (long_inv_freq_.empty()) return false;
  const int32_t pass_length = position < num_prompt_tokens ? num_prompt_tokens : position + 1;
  return pass_length > long_threshold_;
}

std::vector<uint8_t> RotaryEmbedding::LongFactorFlags(const StepBatch& batch) const {
  if (long_inv_freq_.empty()) return {};
  std::vector<uint8_t> flags;
  flags.reserve(batch.token_ids.size());
  for (const SequenceStep& s : batch.seqs) {
    for (int32_t p = s.context_len - s.num_new_tokens; p < s.context_len; ++p) {
      flags.push_back(UsesLongFactors(p, s.num_prompt_tokens) ? 1 : 0);
    }
  }
  return flags;
}

void RotaryEmbedding::CosSin(int32_t position, bool use_long, float* cos_out,
                             float* sin_out) const {
  const std::vector<double>& inv_freq = use_long ? long_inv_freq_ : inv_freq_;
  for (int i = 0; i < rotary_dim_ / 2; ++i) {
    const double angle = static_cast<double>(position) * inv_freq[i];
    // transformers scales cos and sin (yarn's attention factor; 1 otherwise) in fp32.
    cos_out[i] = static_cast<float>(std::cos(angle)) * attention_factor_;
    sin_out[i] = static_cast<float>(std::sin(angle)) * attention_factor_;
  }
}

void RotaryEmbedding::Apply(absl::Span<const int32_t> positions, int64_t num_heads, float* x,
                            absl::Span<const uint8_t> use_long) const {
  const int half = rotary_dim_ / 2;
  // Tokens split between the compute threads; each token's rotation is the same alone.
  ParallelRanges(static_cast<int64_t>(positions.size()), /*min_per_thread=*/4,
                 [&](int64_t begin, int64_t end) {
    std::vector<float> cos_v(half), sin_v(half);
    for (int64_t t = begin; t < end; ++t) {
      CosSin(positions[t], !use_long.empty() && use_long[t] != 0, cos_v.data(), sin_v.data());
      for (int64_t h = 0; h < num_heads; ++h) {
        float* v = x + (t * num_heads + h) * rotary_dim_;
        for (int i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = a * cos_v[i] - b * sin_v[i];
          v[i + half] = b * cos_v[i] + a * sin_v[i];
        }
      }
    }
  });
}

std::vector<float> RotaryEmbedding::CosSinTable(int max_positions) const {
  const int sets = has_long_factors() ? 2 : 1;
  std::vector<float> table(static_cast<size_t>(sets) * max_positions * rotary_dim_);
  for (int set = 0; set < sets; ++set) {
    for (int p = 0; p < max_positions; ++p) {
      float* row = table.data() + (static_cast<size_t>(set) * max_positions + p) * rotary_dim_;
      CosSin(p, set == 1, row, row + rotary_dim_ / 2);
    }
  }
  return table;
}

}  // namespace tpserve
