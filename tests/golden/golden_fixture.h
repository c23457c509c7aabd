// GoldenFixture: a tiny Hugging Face checkpoint under tests/data/models/<name>/ with the
// outputs transformers recorded for it (golden.json + logits_*.npy), as written by
// tests/oracle/make_fixture.py.
#ifndef TPSERVE_TESTS_GOLDEN_GOLDEN_FIXTURE_H_
#define TPSERVE_TESTS_GOLDEN_GOLDEN_FIXTURE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/tensor.h"

namespace tpserve {

struct GreedyCase {
  int prompt_index = 0;
  std::vector<int32_t> output_ids;
  std::vector<double> output_logprobs;
};

struct GoldenFixture {
  std::string name;
  std::string dir;
  std::vector<int> tp_sizes;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<Tensor> logits;  // [len_i, vocab] per prompt
  std::vector<GreedyCase> greedy;
};

// The fixture directories under `root` (each holding golden.json), sorted.
std::vector<std::string> ListFixtures(const std::string& root);
absl::StatusOr<GoldenFixture> LoadFixture(const std::string& dir);

// The batches a golden test runs: every prompt in one batch (`together`, the staggered
// schedule) or each prompt alone.
std::vector<std::vector<std::vector<int32_t>>> PromptGroups(const GoldenFixture& f,
                                                             bool together);

// The runfiles path of tests/data/models.
std::string FixtureRoot();

}  // namespace tpserve

#endif  // TPSERVE_TESTS_GOLDEN_GOLDEN_FIXTURE_H_
