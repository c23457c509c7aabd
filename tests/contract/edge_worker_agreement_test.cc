// The gRPC edge and the ranks check sampling parameters separately; a request the edge
// accepts but a rank refuses would fail a whole step plan and take the pool (and every
// request on it) down. This test walks each parameter over its edge cases, through the
// real path — ValidateSampling → ToEngineRequest (the one fill of the ranks' sampling
// message, which the scheduler sends as is) → ToSamplingParams (the ranks' check) — and requires that the ranks accept whatever the
// edge accepts, carrying each value unchanged.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/generate_convert.h"
#include "server/request_validation.h"
#include "server/sequence.h"
#include "worker/rank/sequence_table.h"
#include "worker/sampling/sampler.h"

namespace tpserve {
namespace {

constexpr int kVocab = 100;
constexpr RequestLimits kLimits{kVocab, /*max_context=*/64, /*has_tokenizer=*/false};

// The ranks' view of `request`, or their refusal.
absl::StatusOr<SamplingParams> RanksView(const v1::GenerateRequest& request) {
  EngineRequest engine =
      ToEngineRequest(request, {1, 2, 3}, kLimits.max_context, /*seed=*/7, absl::InfiniteFuture());
  Sequence seq(1, engine, nullptr, {});
  return ToSamplingParams(seq.request().sampling, kVocab);
}

struct Probe {
  std::string field;
  std::function<void(v1::SamplingParams*)> set;
};

std::vector<Probe> Probes() {
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  const float floats[] = {-inf, -3, -2.0001f, -2, -1, -0.5f, 0, 1e-30f, 1e-6f, 0.5f, 1,
                          1.0001f, 2, 2.0001f, 3, 1e30f, inf, nan};
  const int ints[] = {std::numeric_limits<int>::min(), -2, -1, 0, 1, 20, 21, kVocab - 1,
                      kVocab, kVocab + 1, std::numeric_limits<int>::max()};
  std::vector<Probe> probes;
  for (float v : floats) {
    const std::string at = "=" + std::to_string(v);
    probes.push_back({"temperature" + at, [v](auto* s) { s->set_temperature(v); }});
    probes.push_back({"top_p" + at, [v](auto* s) { s->set_top_p(v); }});
    probes.push_back({"min_p" + at, [v](auto* s) { s->set_min_p(v); }});
    probes.push_back({"repetition_penalty" + at, [v](auto* s) { s->set_repetition_penalty(v); }});
    probes.push_back({"presence_penalty" + at, [v](auto* s) { s->set_presence_penalty(v); }});
    probes.push_back({"frequency_penalty" + at, [v](auto* s) { s->set_frequency_penalty(v); }});
  }
  for (int v : ints) {
    const std::string at = "=" + std::to_string(v);
    probes.push_back({"top_k" + at, [v](auto* s) { s->set_top_k(v); }});
    probes.push_back({"logprobs" + at, [v](auto* s) { s->set_logprobs(v); }});
    probes.push_back({"prompt_logprobs" + at, [v](auto* s) { s->set_prompt_logprobs(v); }});
  }
  return probes;
}

TEST(EdgeWorkerAgreementTest, WhatTheEdgeAcceptsTheRanksAccept) {
  int accepted = 0, refused = 0;
  for (const Probe& probe : Probes()) {
    v1::GenerateRequest request;
    request.mutable_token_ids()->add_ids(1);
    probe.set(request.mutable_sampling());
    if (!ValidateSampling(request.sampling(), kLimits).ok()) {
      ++refused;
      continue;
    }
    ++accepted;
    const absl::StatusOr<SamplingParams> ranks = RanksView(request);
    EXPECT_TRUE(ranks.ok()) << probe.field << ": the edge accepts it, the ranks refuse it: "
                            << ranks.status();
  }
  // Both sides of every range were probed.
  EXPECT_GT(accepted, 40);
  EXPECT_GT(refused, 40);
}

TEST(EdgeWorkerAgreementTest, EveryParameterReachesTheRanksUnchanged) {
  v1::GenerateRequest request;
  request.mutable_token_ids()->add_ids(1);
  v1::SamplingParams* s = request.mutable_sampling();
  s->set_temperature(0.7f);
  s->set_top_k(13);
  s->set_top_p(0.8f);
  s->set_min_p(0.05f);
  s->set_repetition_penalty(1.3f);
  s->set_presence_penalty(-0.4f);
  s->set_frequency_penalty(0.9f);
  s->set_seed(424242);
  s->set_logprobs(5);
  s->set_prompt_logprobs(2);
  ASSERT_TRUE(ValidateSampling(*s, kLimits).ok());
  const absl::StatusOr<SamplingParams> p = RanksView(request);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->temperature, 0.7f);
  EXPECT_EQ(p->top_k, 13);
  EXPECT_EQ(p->top_p, 0.8f);
  EXPECT_EQ(p->min_p, 0.05f);
  EXPECT_EQ(p->repetition_penalty, 1.3f);
  EXPECT_EQ(p->presence_penalty, -0.4f);
  EXPECT_EQ(p->frequency_penalty, 0.9f);
  EXPECT_EQ(p->seed, 424242u);
  EXPECT_EQ(p->logprobs, 5);
  EXPECT_EQ(p->prompt_logprobs, 2);
}

TEST(EdgeWorkerAgreementTest, UnsetParametersTakeTheDocumentedDefaults) {
  v1::GenerateRequest request;
  request.mutable_token_ids()->add_ids(1);
  const absl::StatusOr<SamplingParams> p = RanksView(request);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->temperature, 1.0f);
  EXPECT_EQ(p->top_k, 0);  // no limit
  EXPECT_EQ(p->top_p, 1.0f);
  EXPECT_EQ(p->min_p, 0.0f);
  EXPECT_EQ(p->repetition_penalty, 1.0f);
  EXPECT_EQ(p->presence_penalty, 0.0f);
  EXPECT_EQ(p->frequency_penalty, 0.0f);
  EXPECT_EQ(p->seed, 7u);  // the server's draw
  EXPECT_EQ(p->logprobs, 0);
  EXPECT_FALSE(p->prompt_logprobs.has_value());
}

// What an EngineRequest carries when nobody sets its sampling (the engine's own tests,
// tools) is what the edge resolves for an unset message, and the ranks accept it.
TEST(EdgeWorkerAgreementTest, AnEngineRequestsDefaultSamplingIsTheEdgesUnsetSampling) {
  v1::GenerateRequest request;
  request.mutable_token_ids()->add_ids(1);
  request.mutable_sampling()->set_seed(0);
  EngineRequest resolved =
      ToEngineRequest(request, {1}, kLimits.max_context, /*seed=*/0, absl::InfiniteFuture());
  EXPECT_EQ(EngineRequest().sampling.SerializeAsString(), resolved.sampling.SerializeAsString());
  EXPECT_TRUE(ToSamplingParams(EngineRequest().sampling, kVocab).ok());
}

}  // namespace
}  // namespace tpserve
