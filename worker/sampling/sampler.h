// Sampler: turns the logits that rank 0 gathers into next tokens and their logprobs.
//
// Rank 0 calls SampleBatch once per step on the LM head's output [rows, vocab_size]
// (padded vocab entries already stripped), and PromptLogprobs for the prompt positions of
// sequences that asked for prompt logprobs. Every function here is pure: a request's
// result depends only on its logits row, its params (seed included) and its token history
// — never on its batch mates, their order or the thread count — so a seed reproduces its
// output. Nothing is shared; calls may run on any thread.
//
// One row is processed in Hugging Face's (and vLLM's) order:
//  1. repetition_penalty p, as HF's RepetitionPenaltyLogitsProcessor, once per distinct
//     token of prompt + output: l > 0 ? l / p : l · p.
//  2. presence and frequency penalties, as OpenAI and vLLM, over output tokens only:
//     l −= presence · [c > 0] + frequency · c, c = the token's count in the output.
//  3. temperature T: 0 (or so small that 1/T overflows) is greedy, the argmax of the
//     penalised logits with ties going to the lowest id (steps 4–6 always keep that
//     token). Else probs = softmax(l / T).
//  4. top_k: keep exactly the k most probable tokens, ties to the lower id (HF keeps every
//     token tied with the k-th; this keeps k).
//  5. top_p: keep the shortest prefix, in (prob desc, id asc) order, whose mass
//     renormalised over what 4 kept is ≥ top_p; at least one token (HF TopPLogitsWarper).
//  6. min_p: drop tokens whose prob < min_p · the largest prob (HF MinPLogitsWarper).
//  7. draw u ∈ [0, 1) from a counter-based hash of (seed, step), step = tokens generated
//     so far, and pick the first kept token whose cumulative mass exceeds u · kept mass,
//     walking in (prob desc, id asc) order — or in id order when neither top_k nor top_p
//     truncates, which spares sorting the vocabulary.
//
// Logprobs are "raw" (vLLM's default): log_softmax of the logits as the model returned
// them, before penalties and temperature. Top-n lists are ordered (logprob desc, id asc).
#ifndef TPSERVE_WORKER_SAMPLING_SAMPLER_H_
#define TPSERVE_WORKER_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/sampling/sampling_params.h"
#include "worker/tensor.h"

namespace tpserve {

// logits: [rows, vocab_size]. One result per request, in request order. Any malformed
// request (params out of range, no seed, row out of range, a history token outside
// [0, vocab_size)) or a non-finite logits row fails the whole call with a status that
// names the request; nothing is sampled then.
absl::StatusOr<std::vector<SampleResult>> SampleBatch(
    const Tensor& logits, absl::Span<const SampleRequest> requests);

// Raw logprobs of `next_tokens` under consecutive rows of `logits` [rows, vocab_size]:
// row first_row + i scores next_tokens[i], with its top_n alternatives. For prompt
// logprobs, pass the rows of prompt positions [a, b) (computed with all_logits) and the
// prompt tokens [a + 1, b + 1): position j's logits predict token j + 1, so the first
// prompt token never gets a logprob, and the last prompt row is sampled, not scored.
absl::StatusOr<std::vector<SampleResult>> PromptLogprobs(
    const Tensor& logits, int64_t first_row, absl::Span<const int32_t> next_tokens,
    int top_n);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_SAMPLING_SAMPLER_H_
