#include "server/step_result_check.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tpserve {

namespace {

// A logprob as a rank computes it: finite (or -inf, a token the model rules out), ≤ 0.
bool IsLogprob(float logprob) { return !std::isnan(logprob) && logprob <= 1e-4f; }

absl::Status ValidateLogprobs(const worker::v1::PositionLogprobs& lp, int top_n, int vocab,
                              const std::string& where) {
  const auto in_vocab = [vocab](int32_t id) { return id >= 0 && (vocab == 0 || id < vocab); };
  if (!in_vocab(lp.chosen().token_id()) || !IsLogprob(lp.chosen().logprob())) {
    return absl::UnavailableError(absl::StrCat(where, ": logprob ", lp.chosen().logprob(),
                                               " of token ", lp.chosen().token_id()));
  }
  if (lp.top_size() > top_n) {
    return absl::UnavailableError(
        absl::StrCat(where, ": ", lp.top_size(), " alternatives, at most ", top_n, " asked"));
  }
  for (const worker::v1::Logprob& alt : lp.top()) {
    if (!in_vocab(alt.token_id()) || !IsLogprob(alt.logprob())) {
      return absl::UnavailableError(absl::StrCat(where, ": alternative logprob ", alt.logprob(),
                                                 " of token ", alt.token_id()));
    }
  }
  return absl::OkStatus();
}

int64_t ExpectedPromptLogprobs(const ScheduledSequence& s) {
  if (s.seq->request().sampling.prompt_logprobs() < 0) return 0;
  // One per computed position whose successor is a prompt token (as worker.proto says).
  const int64_t end = std::min(s.first_position + s.num_new_tokens, s.seq->num_prompt_tokens() - 1);
  return std::max<int64_t>(0, end - s.first_position);
}

// A sequence's own failure: a real error code, and nothing else in the output.
absl::Status CheckError(const worker::v1::SequenceOutput& output, const std::string& where) {
  const int code = output.error().code();
  if (code <= 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::UnavailableError(absl::StrCat(where, ": error with status code ", code));
  }
  if (output.has_token_id() || output.has_logprobs() || output.prompt_logprobs_size() > 0) {
    return absl::UnavailableError(absl::StrCat(where, ": an error and results both"));
  }
  return absl::OkStatus();
}

absl::Status CheckOutput(uint64_t step, const ScheduledSequence& scheduled,
                         const worker::v1::SequenceOutput& output, int vocab) {
  const Sequence& seq = *scheduled.seq;
  const std::string where = absl::StrCat("step ", step, ": sequence ", output.seq_id());
  if (output.has_error()) return CheckError(output, where);
  const EngineRequest& request = seq.request();
  if (output.has_token_id()) {
    const int32_t token = output.token_id();
    if (token < 0 || (vocab > 0 && token >= vocab)) {
      return absl::UnavailableError(absl::StrCat(where, ": sampled token ", token,
                                                 " outside the vocabulary [0, ", vocab, ")"));
    }
    if (request.sampling.logprobs() >= 0) {
      if (!output.has_logprobs() || output.logprobs().chosen().token_id() != token) {
        return absl::UnavailableError(
            absl::StrCat(where, ": logprobs asked for, not given for token ", token));
      }
      TPSERVE_RETURN_IF_ERROR(ValidateLogprobs(output.logprobs(), request.sampling.logprobs(), vocab,
                                               where));
    }
  }
  if (output.prompt_logprobs_size() != ExpectedPromptLogprobs(scheduled)) {
    return absl::UnavailableError(absl::StrCat(where, ": ", output.prompt_logprobs_size(),
                                               " prompt logprobs, ",
                                               ExpectedPromptLogprobs(scheduled), " expected"));
  }
  for (const worker::v1::PositionLogprobs& lp : output.prompt_logprobs()) {
    TPSERVE_RETURN_IF_ERROR(ValidateLogprobs(lp, std::max(request.sampling.prompt_logprobs(), 0), vocab,
                                             where + " (prompt)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckStepResult(const ScheduledStep& step, const worker::v1::StepResult& result,
                             int vocab_size) {
  absl::flat_hash_map<uint64_t, const ScheduledSequence*> scheduled;
  size_t expected_tokens = 0;
  for (const ScheduledSequence& s : step.batch) {
    scheduled[s.seq->id()] = &s;
    expected_tokens += s.samples() ? 1 : 0;
  }
  size_t tokens = 0, failed = 0;
  absl::flat_hash_set<uint64_t> answered;
  for (const worker::v1::SequenceOutput& output : result.sequences()) {
    auto it = scheduled.find(output.seq_id());
    if (it == scheduled.end() ||
        (!output.has_error() && output.has_token_id() != it->second->samples())) {
      return absl::UnavailableError(absl::StrCat("step ", step.plan.step(),
                                                 ": unexpected output for sequence ",
                                                 output.seq_id()));
    }
    if (!answered.insert(output.seq_id()).second) {
      return absl::UnavailableError(absl::StrCat("step ", step.plan.step(), ": sequence ",
                                                 output.seq_id(), " answered twice"));
    }
    TPSERVE_RETURN_IF_ERROR(CheckOutput(step.plan.step(), *it->second, output, vocab_size));
    tokens += output.has_token_id() ? 1 : 0;
    failed += output.has_error() && it->second->samples() ? 1 : 0;
  }
  for (const ScheduledSequence& s : step.batch) {
    if (!answered.contains(s.seq->id()) && ExpectedPromptLogprobs(s) > 0) {
      return absl::UnavailableError(absl::StrCat("step ", step.plan.step(), ": sequence ",
                                                 s.seq->id(), " asked for prompt logprobs, "
                                                 "got no output"));
    }
  }
  if (tokens + failed != expected_tokens ||
      result.sequences_size() > static_cast<int>(step.batch.size())) {
    return absl::UnavailableError(absl::StrCat("step ", step.plan.step(), ": ", tokens,
                                               " tokens sampled, ", expected_tokens, " expected"));
  }
  return absl::OkStatus();
}

}  // namespace tpserve
