#include "client/generate_flags.h"

#include <string>
#include <vector>

#include "base/status_macros.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

struct Parsed {
  ArgParser args{"test"};
  GenerateFlags flags;
};

absl::StatusOr<v1::GenerateRequest> Build(std::vector<std::string> argv_strings,
                                          const std::string& text) {
  Parsed p;
  AddGenerateFlags(p.args, &p.flags);
  argv_strings.insert(argv_strings.begin(), "test");
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  TPSERVE_RETURN_IF_ERROR(p.args.Parse(static_cast<int>(argv.size()), argv.data()).status());
  return BuildGenerateRequest(p.args, p.flags, text);
}

TEST(GenerateFlagsTest, OnlyGivenFlagsAreSet) {
  absl::StatusOr<v1::GenerateRequest> r = Build({}, "hello");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text(), "hello");
  EXPECT_FALSE(r->sampling().has_max_tokens());
  EXPECT_FALSE(r->sampling().has_temperature());
  EXPECT_FALSE(r->sampling().has_seed());
  EXPECT_FALSE(r->sampling().has_logprobs());
  EXPECT_FALSE(r->has_add_special_tokens());
}

TEST(GenerateFlagsTest, EveryFlagReachesTheRequest) {
  absl::StatusOr<v1::GenerateRequest> r = Build({"--token-ids",
                                                 "1,2,3",
                                                 "--max-tokens",
                                                 "8",
                                                 "--temperature",
                                                 "0",
                                                 "--top-k",
                                                 "5",
                                                 "--top-p=0.9",
                                                 "--min-p",
                                                 "0.1",
                                                 "--repetition-penalty",
                                                 "1.1",
                                                 "--presence-penalty",
                                                 "0.5",
                                                 "--frequency-penalty",
                                                 "-0.5",
                                                 "--seed",
                                                 "42",
                                                 "--stop",
                                                 "a",
                                                 "--stop",
                                                 "b",
                                                 "--stop-token-ids",
                                                 "7,8",
                                                 "--ignore-eos",
                                                 "--logprobs",
                                                 "2",
                                                 "--prompt-logprobs",
                                                 "1",
                                                 "--keep-special-tokens",
                                                 "--request-id",
                                                 "r1",
                                                 "--n",
                                                 "3"},
                                                "");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->token_ids().ids_size(), 3);
  const v1::SamplingParams& s = r->sampling();
  EXPECT_EQ(s.max_tokens(), 8);
  EXPECT_TRUE(s.has_temperature());
  EXPECT_EQ(s.temperature(), 0.0f);
  EXPECT_EQ(s.top_k(), 5);
  EXPECT_FLOAT_EQ(s.top_p(), 0.9f);
  EXPECT_FLOAT_EQ(s.min_p(), 0.1f);
  EXPECT_FLOAT_EQ(s.repetition_penalty(), 1.1f);
  EXPECT_FLOAT_EQ(s.presence_penalty(), 0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty(), -0.5f);
  EXPECT_EQ(s.seed(), 42u);
  EXPECT_EQ(s.stop_size(), 2);
  EXPECT_EQ(s.stop(1), "b");
  EXPECT_EQ(s.stop_token_ids_size(), 2);
  EXPECT_TRUE(s.ignore_eos());
  EXPECT_EQ(s.logprobs(), 2);
  EXPECT_EQ(s.prompt_logprobs(), 1);
  EXPECT_EQ(s.n(), 3);
  EXPECT_FALSE(r->skip_special_tokens());
  EXPECT_EQ(r->request_id(), "r1");
}

TEST(GenerateFlagsTest, PromptProblems) {
  EXPECT_NE(Build({}, "").status().message().find("give a prompt or --token-ids"),
            std::string::npos);
  EXPECT_NE(Build({"--token-ids", "1"}, "x").status().message().find("not both"),
            std::string::npos);
  EXPECT_NE(Build({"--token-ids", "1,x"}, "").status().message().find("--token-ids"),
            std::string::npos);
  EXPECT_NE(Build({"--stop-token-ids", "q"}, "x").status().message().find("--stop-token-ids"),
            std::string::npos);
  EXPECT_NE(Build({}, "a\xff").status().message().find("the prompt must be valid UTF-8"),
            std::string::npos);
  EXPECT_NE(Build({"--stop", "\xc3"}, "x").status().message().find("--stop must be valid UTF-8"),
            std::string::npos);
}

}  // namespace
}  // namespace tpserve
