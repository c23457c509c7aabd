// Malformed StepPlans: every rule of proto/tpserve/v1/worker.proto that a rank checks
// gives INVALID_ARGUMENT (never a crash), and a rejected plan changes nothing: the next
// valid plan still runs.
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/golden/golden_fixture.h"
#include "tests/golden/plan_driver.h"
#include "worker/rank/local_rank_group.h"

namespace tpserve {
namespace {

using worker::v1::StepPlan;

struct BadPlan {
  std::string name;
  std::function<void(StepPlan&)> mutate;
};

// Step 1: sequence 1 prefills [5, 6, 7] into block 0.
StepPlan FirstPlan() {
  StepPlan plan;
  plan.set_step(1);
  worker::v1::NewSequence* seq = plan.add_new_sequences();
  seq->set_seq_id(1);
  for (int32_t t : {5, 6, 7}) seq->add_token_ids(t);
  *seq->mutable_sampling() = GreedyParams(0, -1);
  seq->add_block_table(0);
  seq->set_num_new_tokens(3);
  return plan;
}

// Step 2: sequence 1 decodes its sampled token `token`.
StepPlan SecondPlan(int32_t token) {
  StepPlan plan;
  plan.set_step(2);
  worker::v1::SequenceDelta* d = plan.add_running();
  d->set_seq_id(1);
  d->add_new_token_ids(token);
  d->add_new_block_ids(1);
  d->set_num_new_tokens(1);
  return plan;
}

class RankExecutorMalformedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RankExecutorOptions o;
    o.block_size = 4;
    o.num_blocks = 8;
    o.limits.set_max_context(16);
    auto g = LocalRankGroup::Create(FixtureRoot() + "/llama_gqa", 2, o);
    ASSERT_TRUE(g.ok()) << g.status();
    group_ = *std::move(g);
  }

  void ExpectAllRejected(const StepPlan& base, const std::vector<BadPlan>& cases) {
    for (const BadPlan& c : cases) {
      StepPlan plan = base;
      c.mutate(plan);
      absl::StatusOr<worker::v1::StepResult> r = group_->Execute(plan);
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.name << ": " << r.status();
    }
  }

  std::unique_ptr<LocalRankGroup> group_;
};

worker::v1::NewSequence& New(StepPlan& p) { return *p.mutable_new_sequences(0); }

TEST_F(RankExecutorMalformedTest, RejectsBadFirstPlans) {
  ExpectAllRejected(FirstPlan(), {
      {"step 2 first", [](StepPlan& p) { p.set_step(2); }},
      {"step 0", [](StepPlan& p) { p.set_step(0); }},
      {"token = vocab", [](StepPlan& p) { New(p).set_token_ids(1, 320); }},
      {"negative token", [](StepPlan& p) { New(p).set_token_ids(0, -1); }},
      {"no tokens", [](StepPlan& p) { New(p).clear_token_ids(); }},
      {"block id = num_blocks", [](StepPlan& p) { New(p).set_block_table(0, 8); }},
      {"negative block id", [](StepPlan& p) { New(p).set_block_table(0, -1); }},
      {"no block table", [](StepPlan& p) { New(p).clear_block_table(); }},
      {"short block table", [](StepPlan& p) {
         New(p).add_token_ids(1);
         New(p).add_token_ids(2);
         New(p).set_num_new_tokens(5);
       }},
      {"zero new tokens", [](StepPlan& p) { New(p).set_num_new_tokens(0); }},
      {"more new tokens than sent", [](StepPlan& p) { New(p).set_num_new_tokens(4); }},
      {"cached + new > len", [](StepPlan& p) { New(p).set_num_cached_tokens(1); }},
      {"negative cached", [](StepPlan& p) { New(p).set_num_cached_tokens(-1); }},
      {"prompt longer than tokens", [](StepPlan& p) { New(p).set_num_prompt_tokens(4); }},
      {"duplicate new id", [](StepPlan& p) { *p.add_new_sequences() = p.new_sequences(0); }},
      {"drop unknown", [](StepPlan& p) { p.add_drop_seq_ids(9); }},
      {"running unknown", [](StepPlan& p) { p.add_running()->set_seq_id(9); }},
      {"unresolved defaults", [](StepPlan& p) { New(p).clear_sampling(); }},
      {"too many logprobs", [](StepPlan& p) { New(p).mutable_sampling()->set_logprobs(21); }},
      {"bad prompt logprobs", [](StepPlan& p) { New(p).mutable_sampling()->set_prompt_logprobs(-2); }},
      {"context > max_context", [](StepPlan& p) {
         for (int i = 0; i < 14; ++i) New(p).add_token_ids(3);
         New(p).set_num_new_tokens(17);
         for (int b = 1; b < 5; ++b) New(p).add_block_table(b);
       }},
  });
  absl::StatusOr<worker::v1::StepResult> r = group_->Execute(FirstPlan());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->sequences_size(), 1);
  EXPECT_TRUE(r->sequences(0).has_token_id());
}

TEST_F(RankExecutorMalformedTest, RejectsBadLaterPlans) {
  absl::StatusOr<worker::v1::StepResult> first = group_->Execute(FirstPlan());
  ASSERT_TRUE(first.ok()) << first.status();
  const int32_t token = first->sequences(0).token_id();
  ExpectAllRejected(SecondPlan(token), {
      {"repeated step", [](StepPlan& p) { p.set_step(1); }},
      {"gap", [](StepPlan& p) { p.set_step(3); }},
      {"running twice", [](StepPlan& p) { *p.add_running() = p.running(0); }},
      {"two new tokens pending", [](StepPlan& p) { p.mutable_running(0)->set_num_new_tokens(2); }},
      {"nothing to compute", [](StepPlan& p) { p.mutable_running(0)->clear_new_token_ids(); }},
      {"block out of range", [](StepPlan& p) { p.mutable_running(0)->set_new_block_ids(0, 8); }},
      {"token out of range", [](StepPlan& p) { p.mutable_running(0)->set_new_token_ids(0, 999); }},
      {"new while held", [](StepPlan& p) { *p.add_new_sequences() = FirstPlan().new_sequences(0); }},
      {"dropped then running", [](StepPlan& p) { p.add_drop_seq_ids(1); }},
      {"dropped twice", [](StepPlan& p) {
         p.clear_running();
         p.add_drop_seq_ids(1);
         p.add_drop_seq_ids(1);
       }},
  });
  absl::StatusOr<worker::v1::StepResult> second = group_->Execute(SecondPlan(token));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->step(), 2u);
  // Drop and re-admit under the same id in one plan: legal.
  StepPlan third = FirstPlan();
  third.set_step(3);
  third.add_drop_seq_ids(1);
  EXPECT_TRUE(group_->Execute(third).ok());
}

TEST_F(RankExecutorMalformedTest, NewTokensMidPrefillRejected) {
  StepPlan plan = FirstPlan();
  New(plan).set_num_new_tokens(2);  // a chunk: no token sampled
  absl::StatusOr<worker::v1::StepResult> r = group_->Execute(plan);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->sequences(0).has_token_id());
  StepPlan next = SecondPlan(4);  // sends a token though the prompt is unfinished
  EXPECT_EQ(group_->Execute(next).status().code(), absl::StatusCode::kInvalidArgument);
  next.mutable_running(0)->clear_new_token_ids();
  r = group_->Execute(next);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->sequences(0).has_token_id());
}

}  // namespace
}  // namespace tpserve
