#include "base/args.h"

#include "gtest/gtest.h"

namespace tpserve {
namespace {

absl::Status ParseVec(ArgParser& p, std::vector<const char*> args) {
  args.insert(args.begin(), "prog");
  return p.Parse(static_cast<int>(args.size()), const_cast<char**>(args.data()));
}

TEST(ArgParserTest, ParsesAllKinds) {
  std::string model;
  int64_t tp = 1;
  double temp = 0;
  bool inc = false;
  std::vector<std::string> stops;
  ArgParser p("prog");
  p.AddString("model", &model, "");
  p.AddInt("tp", &tp, "");
  p.AddDouble("temperature", &temp, "");
  p.AddBool("incremental", &inc, "");
  p.AddRepeated("stop", &stops, "");
  ASSERT_TRUE(ParseVec(p, {"--model", "m", "--tp=2", "--temperature", "0.5", "--incremental",
                           "--stop", "a", "--stop=b", "text"})
                  .ok());
  EXPECT_EQ(model, "m");
  EXPECT_EQ(tp, 2);
  EXPECT_EQ(temp, 0.5);
  EXPECT_TRUE(inc);
  EXPECT_EQ(stops, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(p.positional(), std::vector<std::string>{"text"});
  EXPECT_TRUE(p.Seen("tp"));
}

TEST(ArgParserTest, RejectsBadInput) {
  int64_t tp = 1;
  ArgParser p("prog");
  p.AddInt("tp", &tp, "");
  EXPECT_FALSE(ParseVec(p, {"--tp", "x"}).ok());
  EXPECT_FALSE(ParseVec(p, {"--tp"}).ok());
  EXPECT_FALSE(ParseVec(p, {"--nope", "1"}).ok());
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
