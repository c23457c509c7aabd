#include "server/request_validation.h"

#include <cmath>
#include <functional>
#include <string>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

constexpr RequestLimits kLimits{/*vocab_size=*/100, /*max_context=*/32, /*has_tokenizer=*/true};

v1::GenerateRequest IdsRequest(int n) {
  v1::GenerateRequest r;
  for (int i = 0; i < n; ++i) r.mutable_token_ids()->add_ids(i);
  return r;
}

struct BadCase {
  std::string name;
  std::function<void(v1::GenerateRequest*)> edit;
  std::string message;  // expected substring
  absl::StatusCode code = absl::StatusCode::kInvalidArgument;
};

TEST(RequestValidationTest, AcceptsDefaultsAndEdgesOfEveryRange) {
  v1::GenerateRequest r = IdsRequest(4);
  EXPECT_TRUE(ValidateGenerateRequest(r, kLimits).ok());
  r.set_request_id(std::string(127, '~') + " ");  // 128 printable bytes
  EXPECT_TRUE(ValidateGenerateRequest(r, kLimits).ok());
  v1::SamplingParams* s = r.mutable_sampling();
  s->set_max_tokens(28);
  s->set_temperature(0);
  s->set_top_k(-1);
  s->set_top_p(1);
  s->set_min_p(1);
  s->set_repetition_penalty(0.01f);
  s->set_presence_penalty(-2);
  s->set_frequency_penalty(2);
  s->set_logprobs(20);
  s->set_prompt_logprobs(0);
  s->add_stop(std::string(kMaxStopStringBytes, 'x'));
  s->add_stop_token_ids(99);
  EXPECT_TRUE(ValidateGenerateRequest(r, kLimits).ok()) << ValidateGenerateRequest(r, kLimits);
  r.set_text("héllo");
  EXPECT_TRUE(ValidateGenerateRequest(r, kLimits).ok());
}

TEST(RequestValidationTest, EachBadFieldIsNamedWithItsLimit) {
  const float nan = std::nanf("");
  const std::vector<BadCase> cases = {
      {"no prompt", [](auto* r) { r->clear_prompt(); }, "prompt: set exactly one"},
      {"empty text", [](auto* r) { r->set_text(""); }, "text must not be empty"},
      {"empty ids", [](auto* r) { r->mutable_token_ids()->clear_ids(); },
       "token_ids.ids must not be empty"},
      {"id too big", [](auto* r) { r->mutable_token_ids()->set_ids(2, 100); },
       "token_ids.ids[2] must be in [0, 100), got 100"},
      {"negative id", [](auto* r) { r->mutable_token_ids()->set_ids(0, -1); },
       "token_ids.ids[0] must be in [0, 100), got -1"},
      {"bad utf8", [](auto* r) { r->set_text("a\xff"); }, "text must be valid UTF-8"},
      {"max_tokens 0", [](auto* r) { r->mutable_sampling()->set_max_tokens(0); },
       "sampling.max_tokens must be >= 1, got 0"},
      {"max_tokens -3", [](auto* r) { r->mutable_sampling()->set_max_tokens(-3); },
       "sampling.max_tokens must be >= 1, got -3"},
      {"beyond context", [](auto* r) { r->mutable_sampling()->set_max_tokens(29); },
       "prompt (4 tokens) + sampling.max_tokens (29) must be <= max_context (32)"},
      {"temperature nan", [=](auto* r) { r->mutable_sampling()->set_temperature(nan); },
       "sampling.temperature must be finite and >= 0, got nan"},
      {"temperature < 0", [](auto* r) { r->mutable_sampling()->set_temperature(-0.5f); },
       "sampling.temperature must be finite and >= 0, got -0.5"},
      {"top_p 0", [](auto* r) { r->mutable_sampling()->set_top_p(0); },
       "sampling.top_p must be in (0, 1], got 0"},
      {"top_p > 1", [](auto* r) { r->mutable_sampling()->set_top_p(1.5f); },
       "sampling.top_p must be in (0, 1], got 1.5"},
      {"top_p nan", [=](auto* r) { r->mutable_sampling()->set_top_p(nan); },
       "sampling.top_p must be in (0, 1]"},
      {"top_k -2", [](auto* r) { r->mutable_sampling()->set_top_k(-2); },
       "sampling.top_k must be -1 or 0 (no limit) or in [1, vocab_size 100], got -2"},
      {"top_k past the vocab", [](auto* r) { r->mutable_sampling()->set_top_k(101); },
       "sampling.top_k must be -1 or 0 (no limit) or in [1, vocab_size 100], got 101"},
      {"min_p < 0", [](auto* r) { r->mutable_sampling()->set_min_p(-0.1f); },
       "sampling.min_p must be in [0, 1], got -0.1"},
      {"min_p > 1", [](auto* r) { r->mutable_sampling()->set_min_p(1.1f); },
       "sampling.min_p must be in [0, 1], got 1.1"},
      {"repetition 0", [](auto* r) { r->mutable_sampling()->set_repetition_penalty(0); },
       "sampling.repetition_penalty must be in [0.01, 100], got 0"},
      {"repetition 1e-38",
       [](auto* r) { r->mutable_sampling()->set_repetition_penalty(1e-38f); },
       "sampling.repetition_penalty must be in [0.01, 100], got 1e-38"},
      {"repetition 101", [](auto* r) { r->mutable_sampling()->set_repetition_penalty(101); },
       "sampling.repetition_penalty must be in [0.01, 100], got 101"},
      {"request_id with a newline",
       [](auto* r) { r->set_request_id("abc\ntpserve: forged line"); },
       "request_id must be printable ASCII (0x20-0x7e), byte 3 is 0x0a"},
      {"request_id of 129 bytes", [](auto* r) { r->set_request_id(std::string(129, 'a')); },
       "request_id must be at most 128 bytes, got 129"},
      {"presence 2.5", [](auto* r) { r->mutable_sampling()->set_presence_penalty(2.5f); },
       "sampling.presence_penalty must be in [-2, 2], got 2.5"},
      {"frequency -3", [](auto* r) { r->mutable_sampling()->set_frequency_penalty(-3); },
       "sampling.frequency_penalty must be in [-2, 2], got -3"},
      {"frequency nan", [=](auto* r) { r->mutable_sampling()->set_frequency_penalty(nan); },
       "sampling.frequency_penalty must be in [-2, 2]"},
      {"logprobs 21", [](auto* r) { r->mutable_sampling()->set_logprobs(21); },
       "sampling.logprobs must be in [0, 20], got 21"},
      {"logprobs -1", [](auto* r) { r->mutable_sampling()->set_logprobs(-1); },
       "sampling.logprobs must be in [0, 20], got -1"},
      {"prompt_logprobs 21", [](auto* r) { r->mutable_sampling()->set_prompt_logprobs(21); },
       "sampling.prompt_logprobs must be in [0, 20], got 21"},
      {"too many stops",
       [](auto* r) {
         for (int i = 0; i <= kMaxStopStrings; ++i) r->mutable_sampling()->add_stop("s");
       },
       "sampling.stop has 17 strings; at most 16"},
      {"empty stop", [](auto* r) { r->mutable_sampling()->add_stop(""); },
       "sampling.stop[0] must be 1 to 256 bytes, got 0"},
      {"long stop",
       [](auto* r) { r->mutable_sampling()->add_stop(std::string(kMaxStopStringBytes + 1, 'x')); },
       "sampling.stop[0] must be 1 to 256 bytes, got 257"},
      {"stop bad utf8", [](auto* r) { r->mutable_sampling()->add_stop("\xc3"); },
       "sampling.stop[0] must be valid UTF-8"},
      {"stop id", [](auto* r) { r->mutable_sampling()->add_stop_token_ids(100); },
       "sampling.stop_token_ids[0] must be in [0, 100), got 100"},
      {"too many stop ids",
       [](auto* r) {
         for (int i = 0; i <= kMaxStopTokenIds; ++i) r->mutable_sampling()->add_stop_token_ids(1);
       },
       "sampling.stop_token_ids has 65 ids; at most 64"},
  };
  for (const BadCase& c : cases) {
    v1::GenerateRequest r = IdsRequest(4);
    c.edit(&r);
    const absl::Status s = ValidateGenerateRequest(r, kLimits);
    EXPECT_EQ(s.code(), c.code) << c.name << ": " << s;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << c.name << ": " << s;
  }
}

TEST(RequestValidationTest, TextNeedsATokenizer) {
  RequestLimits no_tokenizer = kLimits;
  no_tokenizer.has_tokenizer = false;
  v1::GenerateRequest r;
  r.set_text("hi");
  absl::Status s = ValidateGenerateRequest(r, no_tokenizer);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("a text prompt needs a tokenizer"), std::string::npos) << s;
  r = IdsRequest(2);
  r.mutable_sampling()->add_stop("x");
  s = ValidateGenerateRequest(r, no_tokenizer);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("sampling.stop needs a tokenizer"), std::string::npos) << s;
  EXPECT_TRUE(ValidateGenerateRequest(IdsRequest(2), no_tokenizer).ok());
}

TEST(RequestValidationTest, PromptLength) {
  EXPECT_TRUE(ValidatePromptLength(31, std::nullopt, 32).ok());
  EXPECT_TRUE(ValidatePromptLength(30, 2, 32).ok());
  const absl::Status full = ValidatePromptLength(32, std::nullopt, 32);
  EXPECT_EQ(full.message(),
            "prompt (32 tokens) must be < max_context (32) to leave room for a token");
  const absl::Status over = ValidatePromptLength(31, 2, 32);
  EXPECT_EQ(over.message(),
            "prompt (31 tokens) + sampling.max_tokens (2) must be <= max_context (32)");
  EXPECT_EQ(ValidatePromptLength(1, 2147483647, 32).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve
