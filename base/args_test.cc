#include "base/args.h"

#include <stdlib.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<ArgParser::Action> ParseVec(ArgParser& p, std::vector<const char*> args) {
  args.insert(args.begin(), "prog");
  return p.Parse(static_cast<int>(args.size()), const_cast<char**>(args.data()));
}

std::string ErrorOf(ArgParser& p, std::vector<const char*> args) {
  absl::StatusOr<ArgParser::Action> r = ParseVec(p, std::move(args));
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(r.status().message());
}

TEST(ArgParserTest, ParsesAllKinds) {
  std::string model;
  int64_t tp = 1;
  double temp = 0;
  bool inc = false;
  std::vector<std::string> stops, text;
  ArgParser p("prog");
  p.AddString("model", &model, "");
  p.AddInt("tp", &tp, "");
  p.AddDouble("temperature", &temp, "");
  p.AddBool("incremental", &inc, "");
  p.AddRepeated("stop", &stops, "");
  p.AddPositional("text", &text, 1, "");
  absl::StatusOr<ArgParser::Action> r =
      ParseVec(p, {"--model", "m", "--tp=2", "--temperature", "-0.5", "--incremental", "--stop",
                   "a", "--stop=b", "text"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, ArgParser::Action::kRun);
  EXPECT_EQ(model, "m");
  EXPECT_EQ(tp, 2);
  EXPECT_EQ(temp, -0.5);
  EXPECT_TRUE(inc);
  EXPECT_EQ(stops, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(text, std::vector<std::string>{"text"});
  EXPECT_TRUE(p.Seen("tp"));
  EXPECT_FALSE(p.Seen("nope"));
}

TEST(ArgParserTest, LastValueWinsAndBoolsTakeExplicitValues) {
  int64_t tp = 1;
  bool a = true, b = false;
  ArgParser p("prog");
  p.AddInt("tp", &tp, "");
  p.AddBool("a", &a, "");
  p.AddBool("b", &b, "");
  ASSERT_TRUE(ParseVec(p, {"--tp", "2", "--tp", "-3", "--a=false", "--b=1"}).ok());
  EXPECT_EQ(tp, -3);
  EXPECT_FALSE(a);
  EXPECT_TRUE(b);
  EXPECT_FALSE(p.Seen("missing"));
}

TEST(ArgParserTest, AliasesSetTheSameFlag) {
  int64_t tp = 1;
  ArgParser p("prog");
  p.AddInt("tp,tensor-parallel-size", &tp, "");
  ASSERT_TRUE(ParseVec(p, {"--tensor-parallel-size", "4"}).ok());
  EXPECT_EQ(tp, 4);
  EXPECT_TRUE(p.Seen("tp"));
  EXPECT_THAT(p.Help(), HasSubstr("--tp,--tensor-parallel-size"));
}

TEST(ArgParserTest, RefusesBadInputNamingTheFlag) {
  int64_t tp = 1;
  double t = 0;
  bool b = false;
  ArgParser p("prog");
  p.AddInt("tp", &tp, "");
  p.AddDouble("temperature", &t, "");
  p.AddBool("flag", &b, "");
  EXPECT_EQ(ErrorOf(p, {"--tp", "x"}), "--tp needs an integer in [-2^63, 2^63), got \"x\"");
}

TEST(ArgParserTest, RefusesEachKindOfMistake) {
  struct Case {
    std::vector<const char*> args;
    std::string message;
  } cases[] = {
      {{"--tp", "99999999999999999999"}, "--tp needs an integer"},  // not clamped
      {{"--tp", "1.5"}, "--tp needs an integer"},
      {{"--temperature", "warm"}, "--temperature needs a number, got \"warm\""},
      {{"--flag=maybe"}, "--flag is true, false, 1 or 0"},
      {{"--tp"}, "--tp"},
      {{"--nope", "1"}, "unknown flag --nope"},
      {{"--nope=1"}, "unknown flag --nope"},
      {{"stray"}, "unexpected argument \"stray\""},
  };
  for (const Case& c : cases) {
    int64_t tp = 1;
    double t = 0;
    bool b = false;
    ArgParser p("prog");
    p.AddInt("tp", &tp, "");
    p.AddDouble("temperature", &t, "");
    p.AddBool("flag", &b, "");
    EXPECT_THAT(ErrorOf(p, c.args), HasSubstr(c.message)) << c.args[0];
    EXPECT_EQ(tp, 1) << c.args[0];
  }
}

TEST(ArgParserTest, HelpShowsDefaultsAndExitsWithoutRunning) {
  for (const char* flag : {"--help", "-h"}) {
    int64_t port = 50051;
    std::string device = "cpu";
    ArgParser p("prog", "Serves things.");
    p.AddInt("port", &port, "port to serve on");
    p.AddString("device", &device, "cpu or cuda");
    testing::internal::CaptureStdout();
    absl::StatusOr<ArgParser::Action> r = ParseVec(p, {"--port", "1", flag});
    const std::string out = testing::internal::GetCapturedStdout();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, ArgParser::Action::kExit);
    EXPECT_THAT(out, HasSubstr("Serves things."));
    EXPECT_THAT(out, HasSubstr("--port INT=50051 "));  // one value: no "..."
    EXPECT_THAT(out, HasSubstr("--device TEXT=cpu"));
    EXPECT_THAT(out, HasSubstr("port to serve on"));
  }
}

TEST(ArgParserTest, VersionPrintsItsText) {
  ArgParser p("prog");
  p.SetVersion("prog 1.2.3 (git abc)");
  testing::internal::CaptureStdout();
  absl::StatusOr<ArgParser::Action> r = ParseVec(p, {"--version"});
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "prog 1.2.3 (git abc)\n");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, ArgParser::Action::kExit);
}

TEST(ArgParserTest, EnvironmentFillsWhatTheCommandLineLeaves) {
  setenv("ARGTEST_MAX_CONTEXT", "512", 1);
  setenv("ARGTEST_TP", "8", 1);
  setenv("ARGTEST_VERBOSE", "true", 1);
  int64_t max_context = 0, tp = 1;
  bool verbose = false;
  std::string before_prefix = "x";
  setenv("ARGTEST_BEFORE", "y", 1);
  ArgParser p("prog");
  p.AddString("before", &before_prefix, "");
  p.SetEnvPrefix("ARGTEST_");
  p.AddInt("max-context", &max_context, "");
  p.AddInt("tp", &tp, "");
  p.AddBool("verbose", &verbose, "");
  EXPECT_THAT(p.Help(), HasSubstr("[env ARGTEST_MAX_CONTEXT]"));
  ASSERT_TRUE(ParseVec(p, {"--tp", "2"}).ok());
  EXPECT_EQ(max_context, 512);
  EXPECT_EQ(tp, 2);  // the command line wins
  EXPECT_TRUE(verbose);
  EXPECT_TRUE(p.Seen("max-context"));
  EXPECT_EQ(before_prefix, "x");  // registered before SetEnvPrefix
  unsetenv("ARGTEST_TP");
  unsetenv("ARGTEST_VERBOSE");
  unsetenv("ARGTEST_BEFORE");

  setenv("ARGTEST_MAX_CONTEXT", "lots", 1);
  int64_t again = 0;
  ArgParser q("prog");
  q.SetEnvPrefix("ARGTEST_");
  q.AddInt("max-context", &again, "");
  EXPECT_THAT(ErrorOf(q, {}),
              HasSubstr("ARGTEST_MAX_CONTEXT (--max-context) needs an integer"));
  unsetenv("ARGTEST_MAX_CONTEXT");
}

TEST(ArgParserTest, CommandsHaveTheirOwnFlagsAndHelp) {
  std::string target = "localhost:50051";
  int64_t top_k = 0, num_prompts = 64;
  std::vector<std::string> text;
  auto make = [&](ArgParser& p) {
    p.AddString("target", &target, "server address");
    ArgParser& generate = p.AddCommand("generate", "generate text");
    generate.AddInt("top-k", &top_k, "keep the k most likely tokens");
    generate.AddPositional("text", &text, 1, "the prompt");
    ArgParser& bench = p.AddCommand("bench", "load test");
    bench.AddInt("num-prompts", &num_prompts, "requests");
  };
  {
    ArgParser p("cli");
    make(p);
    ASSERT_TRUE(ParseVec(p, {"generate", "hi", "--top-k", "5", "--target", "h:1"}).ok());
    EXPECT_EQ(p.command(), "generate");
    EXPECT_EQ(text, std::vector<std::string>{"hi"});
    EXPECT_EQ(top_k, 5);
    EXPECT_EQ(target, "h:1");  // the root's flag after the command
    EXPECT_TRUE(p.command_parser().Seen("top-k"));
    EXPECT_THAT(p.HelpHint(), HasSubstr("'cli generate --help'"));
  }
  {
    ArgParser p("cli");
    make(p);
    EXPECT_THAT(ErrorOf(p, {"bench", "--top-k", "5"}), HasSubstr("unknown flag --top-k"));
  }
  {
    ArgParser p("cli");
    make(p);
    EXPECT_FALSE(ParseVec(p, {}).ok());  // a command is required
  }
  {
    ArgParser p("cli");
    make(p);
    EXPECT_EQ(ErrorOf(p, {"--bogus"}), "unknown flag --bogus");  // before "a command is required"
  }
  {
    ArgParser p("cli");
    make(p);
    EXPECT_EQ(ErrorOf(p, {"generate", "a", "b"}), "unexpected argument \"b\"");
  }
  {
    ArgParser p("cli");
    make(p);
    testing::internal::CaptureStdout();
    absl::StatusOr<ArgParser::Action> r = ParseVec(p, {"bench", "--help"});
    const std::string out = testing::internal::GetCapturedStdout();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, ArgParser::Action::kExit);
    EXPECT_THAT(out, HasSubstr("--num-prompts INT=64"));
    EXPECT_THAT(out, testing::Not(HasSubstr("--top-k")));
  }
}

TEST(ParseIdListTest, ParsesAndRefuses) {
  std::vector<int32_t> ids;
  EXPECT_TRUE(ParseIdList("1, 2,3", &ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(ParseIdList("", &ids).ok());
  EXPECT_FALSE(ParseIdList("1,,2", &ids).ok());
  EXPECT_FALSE(ParseIdList("1,a", &ids).ok());
  EXPECT_FALSE(ParseIdList("99999999999", &ids).ok());
}

}  // namespace
}  // namespace tpserve
