#include "client/generate_flags.h"

#include <string_view>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/utf8.h"

namespace tpserve {

void AddGenerateFlags(ArgParser& args, GenerateFlags* f) {
  args.AddString("token-ids", &f->token_ids, "prompt as token ids: 1,2,3");
  args.AddInt("max-tokens", &f->max_tokens,
              "most tokens to generate (generate: default generation_config.json's "
              "max_new_tokens, else 256, within the context)");
  args.AddDouble("temperature", &f->temperature, "0: greedy");
  args.AddInt("top-k", &f->top_k, "keep the k most likely tokens");
  args.AddDouble("top-p", &f->top_p, "nucleus sampling, (0, 1]");
  args.AddDouble("min-p", &f->min_p, "drop tokens below min-p x the top one's probability");
  args.AddDouble("repetition-penalty", &f->repetition_penalty, "> 0; 1: none");
  args.AddDouble("presence-penalty", &f->presence_penalty, "[-2, 2]");
  args.AddDouble("frequency-penalty", &f->frequency_penalty, "[-2, 2]");
  args.AddInt("seed", &f->seed, "sampler seed");
  args.AddRepeated("stop", &f->stop, "stop string (repeatable)");
  args.AddString("stop-token-ids", &f->stop_token_ids, "stop token ids: 1,2");
  args.AddBool("ignore-eos", &f->ignore_eos, "keep generating after EOS");
  args.AddInt("logprobs", &f->logprobs, "alternatives per generated token, 0..20");
  args.AddInt("prompt-logprobs", &f->prompt_logprobs, "alternatives per prompt token, 0..20");
  args.AddInt("n", &f->n, "completions of the prompt, 1..16 (not with --stream)");
  args.AddBool("no-special-tokens", &f->no_special_tokens, "do not add BOS etc. to text");
  args.AddBool("keep-special-tokens", &f->keep_special_tokens,
               "keep special tokens in the returned text");
  args.AddString("request-id", &f->request_id, "id echoed in server logs");
}

namespace {

// Protobuf rejects invalid UTF-8 in string fields before the server sees the request
// (as INTERNAL, with no message), so it is caught here with the field named.
absl::Status CheckUtf8(const std::string& text, const std::string& what) {
  if (absl::Status s = ValidateUtf8(std::string_view(text)); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be valid UTF-8: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status SetPrompt(const GenerateFlags& f, const std::string& text,
                       v1::GenerateRequest* request) {
  if (f.token_ids.empty()) {
    if (text.empty()) return absl::InvalidArgumentError("give a prompt or --token-ids");
    TPSERVE_RETURN_IF_ERROR(CheckUtf8(text, "the prompt"));
    request->set_text(text);
    return absl::OkStatus();
  }
  if (!text.empty()) return absl::InvalidArgumentError("give a prompt or --token-ids, not both");
  std::vector<int32_t> ids;
  if (absl::Status s = ParseIdList(f.token_ids, &ids); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--token-ids: ", s.message()));
  }
  request->mutable_token_ids()->mutable_ids()->Add(ids.begin(), ids.end());
  return absl::OkStatus();
}

void SetSampling(const ArgParser& args, const GenerateFlags& f, v1::SamplingParams* s) {
  // Out-of-range values are sent as given: the server names the field and the limit.
  if (args.Seen("max-tokens")) s->set_max_tokens(static_cast<int32_t>(f.max_tokens));
  if (args.Seen("temperature")) s->set_temperature(static_cast<float>(f.temperature));
  if (args.Seen("top-k")) s->set_top_k(static_cast<int32_t>(f.top_k));
  if (args.Seen("top-p")) s->set_top_p(static_cast<float>(f.top_p));
  if (args.Seen("min-p")) s->set_min_p(static_cast<float>(f.min_p));
  if (args.Seen("repetition-penalty")) {
    s->set_repetition_penalty(static_cast<float>(f.repetition_penalty));
  }
  s->set_presence_penalty(static_cast<float>(f.presence_penalty));
  s->set_frequency_penalty(static_cast<float>(f.frequency_penalty));
  if (args.Seen("seed")) s->set_seed(static_cast<uint64_t>(f.seed));
  for (const std::string& stop : f.stop) s->add_stop(stop);
  s->set_ignore_eos(f.ignore_eos);
  if (args.Seen("logprobs")) s->set_logprobs(static_cast<int32_t>(f.logprobs));
  if (args.Seen("prompt-logprobs")) s->set_prompt_logprobs(static_cast<int32_t>(f.prompt_logprobs));
  if (args.Seen("n")) s->set_n(static_cast<int32_t>(f.n));
}

}  // namespace

absl::StatusOr<v1::GenerateRequest> BuildGenerateRequest(const ArgParser& args,
                                                         const GenerateFlags& f,
                                                         const std::string& text) {
  v1::GenerateRequest request;
  TPSERVE_RETURN_IF_ERROR(SetPrompt(f, text, &request));
  for (const std::string& stop : f.stop) {
    TPSERVE_RETURN_IF_ERROR(CheckUtf8(stop, "--stop"));
  }
  SetSampling(args, f, request.mutable_sampling());
  if (!f.stop_token_ids.empty()) {
    std::vector<int32_t> ids;
    if (absl::Status s = ParseIdList(f.stop_token_ids, &ids); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--stop-token-ids: ", s.message()));
    }
    request.mutable_sampling()->mutable_stop_token_ids()->Add(ids.begin(), ids.end());
  }
  if (f.no_special_tokens) request.set_add_special_tokens(false);
  if (f.keep_special_tokens) request.set_skip_special_tokens(false);
  request.set_request_id(f.request_id);
  return request;
}

}  // namespace tpserve
