// The `generate` (and `bench`) sampling flags of tpserve-cli, and the GenerateRequest
// they describe. Only flags given on the command line are set in the request, so that
// the server's documented defaults apply to the rest. Used from main's thread only.
#ifndef TPSERVE_CLIENT_GENERATE_FLAGS_H_
#define TPSERVE_CLIENT_GENERATE_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/args.h"
#include "tpserve/v1/inference.pb.h"

namespace tpserve {

struct GenerateFlags {
  std::string token_ids;  // "1,2,3": a token-id prompt instead of text
  int64_t max_tokens = 0;
  double temperature = 1;
  int64_t top_k = 0;
  double top_p = 1;
  double min_p = 0;
  double repetition_penalty = 1;
  double presence_penalty = 0;
  double frequency_penalty = 0;
  int64_t seed = 0;
  std::vector<std::string> stop;
  std::string stop_token_ids;
  bool ignore_eos = false;
  int64_t logprobs = 0;
  int64_t prompt_logprobs = 0;
  int64_t n = 1;                    // completions
  bool no_special_tokens = false;   // add_special_tokens = false
  bool keep_special_tokens = false;  // skip_special_tokens = false
  std::string request_id;
};

// Registers the flags above on `args`, writing into `flags`.
void AddGenerateFlags(ArgParser& args, GenerateFlags* flags);

// The request for prompt `text` (ignored with --token-ids; one of the two is needed).
// InvalidArgument for a missing prompt, malformed id lists or text that is not UTF-8.
absl::StatusOr<v1::GenerateRequest> BuildGenerateRequest(const ArgParser& args,
                                                         const GenerateFlags& flags,
                                                         const std::string& text);

}  // namespace tpserve

#endif  // TPSERVE_CLIENT_GENERATE_FLAGS_H_
