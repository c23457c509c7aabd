#include "client/chat_flags.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

absl::StatusOr<v1::ChatRequest> Build(std::vector<std::string> argv_strings,
                                      const std::string& message) {
  ArgParser args("test");
  GenerateFlags generate;
  ChatFlags chat;
  AddGenerateFlags(args, &generate);
  AddChatFlags(args, &chat);
  argv_strings.insert(argv_strings.begin(), "test");
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  TPSERVE_RETURN_IF_ERROR(args.Parse(static_cast<int>(argv.size()), argv.data()).status());
  return BuildChatRequest(args, chat, generate, message);
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ChatFlagsTest, SystemHistoryAndMessageInOrder) {
  const std::string history = WriteFile("history.json", R"([
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"}])");
  const std::string tools = WriteFile("tools.json", R"([{"type": "function", "function":
      {"name": "get_weather", "description": "d", "parameters": {"type": "object"}}}])");
  absl::StatusOr<v1::ChatRequest> r =
      Build({"--system", "Be brief.", "--messages-file", history, "--tools-file", tools,
             "--tool-choice", "required", "--template-kwargs", R"({"enable_thinking": false})",
             "--temperature", "0", "--max-tokens", "9"},
            "Thanks!");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages_size(), 5);
  EXPECT_EQ(r->messages(0).role(), "system");
  EXPECT_FALSE(r->messages(2).has_content());
  EXPECT_EQ(r->messages(2).tool_calls(0).arguments_json(), R"({"city": "Paris"})");
  EXPECT_EQ(r->messages(3).tool_call_id(), "c1");
  EXPECT_EQ(r->messages(4).content(), "Thanks!");
  ASSERT_EQ(r->tools_size(), 1);
  EXPECT_EQ(r->tools(0).parameters_json(), R"({"type":"object"})");
  EXPECT_EQ(r->tool_choice(), "required");
  EXPECT_EQ(r->sampling().max_tokens(), 9);
  EXPECT_EQ(r->sampling().temperature(), 0);
}

TEST(ChatFlagsTest, RefusesWhatCannotBeSentNamingTheFlag) {
  EXPECT_FALSE(Build({}, "").ok());  // nothing to say
  const std::string bad = WriteFile("bad.json", "{\"role\": \"user\"}");
  absl::StatusOr<v1::ChatRequest> r = Build({"--messages-file", bad}, "x");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "--messages-file")) << r.status();
  r = Build({"--tools-file", bad}, "x");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "--tools-file")) << r.status();
  r = Build({"--template-kwargs", "[1]"}, "x");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "--template-kwargs")) << r.status();
  r = Build({"--messages-file", "/no/such/file.json"}, "x");
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(Build({}, std::string("\xff\xfe")).ok());
}

}  // namespace
}  // namespace tpserve
