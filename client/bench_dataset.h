// The ShareGPT dataset of tpserve-cli bench (--dataset-name sharegpt --dataset-path FILE),
// read as vllm bench serve reads it.
//
// The file is a JSON list of conversations, each {"conversations": [{"from": "human",
// "value": TEXT}, {"from": "gpt", "value": TEXT}, ...], ...}; other keys are ignored. A
// conversation's first turn is the prompt, its second the reply whose length (in tokens,
// without special tokens) the request asks for, unless a fixed output length is given.
// Conversations with fewer than two turns are skipped. The rest are shuffled by the seed
// and taken in that order, keeping those whose prompt has 4 to max_prompt_len tokens,
// whose reply has at least 4 (unless the output length is fixed) and whose prompt and
// output fit in max_total_len; when fewer than num_prompts pass, passing ones are drawn
// again at random (vLLM's oversampling).
//
// A file that breaks these rules is an error naming the file and the rule (an entry by its
// index), never a crash.
#ifndef TPSERVE_CLIENT_BENCH_DATASET_H_
#define TPSERVE_CLIENT_BENCH_DATASET_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/bench.h"

namespace tpserve {

// A conversation's first two turns.
struct Conversation {
  std::string prompt;
  std::string reply;
};

// The conversations of a ShareGPT file with at least two turns, in file order.
absl::StatusOr<std::vector<Conversation>> ReadShareGpt(const std::string& path);

// Text to token ids (the server's tokenizer), with or without its special tokens.
using TokenizeFn =
    std::function<absl::StatusOr<std::vector<int32_t>>(const std::string& text, bool special)>;

struct ShareGptOptions {
  int num_prompts = 0;
  uint64_t seed = 0;
  int output_len = 0;  // > 0: every request asks for this many tokens
  int max_prompt_len = 1024;
  int max_total_len = 2048;
};

// num_prompts requests from `conversations` (see the file comment); prompts tokenized
// with special tokens, as a server tokenizes a text prompt. `path` names the file in
// errors. A tokenizer error is returned as it is.
absl::StatusOr<std::vector<BenchPrompt>> ShareGptPrompts(
    const std::vector<Conversation>& conversations, const ShareGptOptions& options,
    const TokenizeFn& tokenize, const std::string& path);

}  // namespace tpserve

#endif  // TPSERVE_CLIENT_BENCH_DATASET_H_
