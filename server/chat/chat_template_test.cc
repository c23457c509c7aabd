// ChatTemplate against transformers, byte for byte: every case that
// tests/oracle/record_chat_templates.py recorded (real templates of public models ×
// conversations, the tokenizer_config.json forms) must render exactly as
// render_jinja_template did, or fail where it failed. Plus the loading rules.
#include "server/chat/chat_template.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr char kDir[] = "tests/chat_templates/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class RecordedRenders : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    recorded_ = new OrderedJson(
        OrderedJson::parse(ReadFile(absl::StrCat(kDir, "expected_renders.json"))));
  }
  static void TearDownTestSuite() { delete recorded_; }

  // The recorder's frozen clock: a naive local time.
  static std::function<absl::Time()> FixedClock() {
    absl::CivilSecond civil;
    EXPECT_TRUE(absl::ParseCivilTime((*recorded_)["fixed_time"].get<std::string>(), &civil));
    const absl::Time at = absl::FromCivil(civil, absl::LocalTimeZone());
    return [at] { return at; };
  }

  static const OrderedJson& Conversation(const std::string& name) {
    for (const OrderedJson& c : (*recorded_)["conversations"]) {
      if (c["name"] == name) return c;
    }
    ADD_FAILURE() << "no conversation " << name;
    static const OrderedJson kNone;
    return kNone;
  }

  // Inputs as the recorder gave them: the conversation, then the case's kwargs.
  static ChatTemplateInputs Inputs(const OrderedJson& conversation, const OrderedJson& kwargs,
                                   ChatSpecialTokens* tokens) {
    ChatTemplateInputs in;
    in.messages = conversation["messages"];
    if (conversation.contains("tools")) in.tools = conversation["tools"];
    if (conversation.contains("documents")) in.documents = conversation["documents"];
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
      if (it.key() == "add_generation_prompt") {
        in.add_generation_prompt = it.value().get<bool>();
      } else if (it.key() == "continue_final_message") {
        in.continue_final_message = it.value().get<bool>();
      } else if (it.key() == "bos_token") {
        tokens->bos_token = it.value().get<std::string>();
      } else if (it.key() == "eos_token") {
        tokens->eos_token = it.value().get<std::string>();
      } else {
        in.kwargs[it.key()] = it.value();
      }
    }
    return in;
  }

  static void Check(const std::string& label, const ChatTemplate& chat,
                    const ChatTemplateInputs& inputs, const OrderedJson& expected, int* failures) {
    absl::StatusOr<std::string> got = chat.Render(inputs);
    if (expected.contains("output")) {
      if (!got.ok()) {
        ++*failures;
        ADD_FAILURE() << label << ": transformers rendered it, we failed: " << got.status();
      } else if (*got != expected["output"].get<std::string>()) {
        ++*failures;
        ADD_FAILURE() << label << ": renders differ\n--- transformers:\n"
                      << expected["output"].get<std::string>() << "\n--- tpserve:\n"
                      << *got;
      }
      return;
    }
    if (got.ok()) {
      ++*failures;
      ADD_FAILURE() << label << ": transformers failed (" << expected["error"].get<std::string>()
                    << "), we rendered:\n"
                    << *got;
      return;
    }
    // A template's own raise_exception message comes through as it is.
    const std::string error = expected["error"].get<std::string>();
    const std::string prefix = "TemplateError: ";
    if (absl::StartsWith(error, prefix)) {
      EXPECT_TRUE(absl::StrContains(got.status().message(), error.substr(prefix.size())))
          << label << ": " << got.status() << " vs " << error;
    }
  }

  static OrderedJson* recorded_;
};

OrderedJson* RecordedRenders::recorded_ = nullptr;

TEST_F(RecordedRenders, EveryModelTemplateRendersAsTransformersDoes) {
  std::map<std::string, std::string> texts;
  int cases = 0;
  int failures = 0;
  for (const OrderedJson& c : (*recorded_)["cases"]) {
    const std::string file = c["template"].get<std::string>();
    if (!texts.count(file)) texts[file] = ReadFile(absl::StrCat(kDir, file));
    ChatSpecialTokens tokens;
    ChatTemplateInputs inputs = Inputs(Conversation(c["conversation"]), c["kwargs"], &tokens);
    if (inputs.add_generation_prompt && inputs.continue_final_message) continue;  // refused earlier
    absl::StatusOr<std::unique_ptr<ChatTemplate>> chat =
        ChatTemplate::FromTexts({{"default", texts[file]}}, file, tokens);
    ASSERT_TRUE(chat.ok()) << chat.status();
    (*chat)->set_clock(FixedClock());
    Check(absl::StrCat(file, " × ", c["conversation"].get<std::string>()), **chat, inputs, c,
          &failures);
    ++cases;
    if (failures > 20) break;  // enough to go on
  }
  EXPECT_GT(cases, 500);
}

TEST_F(RecordedRenders, TokenizerConfigFormsPickTheTemplateAsTransformersDoes) {
  int failures = 0;
  for (const OrderedJson& c : (*recorded_)["tokenizer_config_cases"]) {
    // Load() reads a model directory: make one holding this tokenizer_config.json.
    const std::string dir = absl::StrCat(::testing::TempDir(), "/tc_", failures, "_",
                                         std::hash<std::string>()(c["config"].get<std::string>()));
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(absl::StrCat(kDir, c["config"].get<std::string>()),
                               dir + "/tokenizer_config.json",
                               std::filesystem::copy_options::overwrite_existing);
    ChatSpecialTokens tokens;
    ChatTemplateInputs inputs = Inputs(Conversation(c["conversation"]), c["kwargs"], &tokens);
    absl::StatusOr<std::unique_ptr<ChatTemplate>> chat = ChatTemplate::Load(dir, "", tokens);
    ASSERT_TRUE(chat.ok()) << chat.status();
    (*chat)->set_clock(FixedClock());
    Check(absl::StrCat(c["config"].get<std::string>(), " × ", c["conversation"].get<std::string>()),
          **chat, inputs, c, &failures);
  }
}

TEST(ChatTemplateLoad, PrefersTheOverrideThenChatTemplateJinjaThenTheConfig) {
  const std::string dir = ::testing::TempDir() + "/load_order";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer_config.json") << R"({"chat_template": "config"})";
  ChatTemplateInputs in;
  in.messages = OrderedJson::array({{{"role", "user"}, {"content", "hi"}}});
  auto render = [&](const std::string& override_path) {
    absl::StatusOr<std::unique_ptr<ChatTemplate>> chat = ChatTemplate::Load(dir, override_path, {});
    EXPECT_TRUE(chat.ok()) << chat.status();
    return chat.ok() ? *(*chat)->Render(in) : std::string();
  };
  EXPECT_EQ(render(""), "config");
  std::ofstream(dir + "/chat_template.jinja") << "jinja file";
  EXPECT_EQ(render(""), "jinja file");
  std::ofstream(dir + "/override.jinja") << "override {{ messages[0].content }}";
  EXPECT_EQ(render(dir + "/override.jinja"), "override hi");
}

TEST(ChatTemplateLoad, ErrorsNameTheFileAndTheRule) {
  const std::string dir = ::testing::TempDir() + "/load_errors";
  std::filesystem::create_directories(dir);
  absl::StatusOr<std::unique_ptr<ChatTemplate>> none = ChatTemplate::Load(dir, "", {});
  EXPECT_TRUE(absl::IsNotFound(none.status())) << none.status();

  std::ofstream(dir + "/tokenizer_config.json") << R"({"chat_template": [{"name": "default"}]})";
  absl::StatusOr<std::unique_ptr<ChatTemplate>> bad_list = ChatTemplate::Load(dir, "", {});
  EXPECT_TRUE(absl::StrContains(bad_list.status().message(), "tokenizer_config.json chat_template[0]"))
      << bad_list.status();

  std::ofstream(dir + "/chat_template.jinja") << "line one\n{% if x %}\nno end";
  absl::StatusOr<std::unique_ptr<ChatTemplate>> syntax = ChatTemplate::Load(dir, "", {});
  ASSERT_FALSE(syntax.ok());
  EXPECT_TRUE(absl::StrContains(syntax.status().message(), "chat_template.jinja")) << syntax.status();

  absl::StatusOr<std::unique_ptr<ChatTemplate>> missing =
      ChatTemplate::Load(dir, dir + "/no-such-file.jinja", {});
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "no-such-file.jinja"))
      << missing.status();
}

TEST(ChatTemplateRender, KwargsCannotReplaceTheInputs) {
  absl::StatusOr<std::unique_ptr<ChatTemplate>> chat =
      ChatTemplate::FromTexts({{"default", "{{ messages | length }}"}}, "t", {});
  ASSERT_TRUE(chat.ok());
  ChatTemplateInputs in;
  in.messages = OrderedJson::array({{{"role", "user"}, {"content", "hi"}}});
  in.kwargs = {{"messages", OrderedJson::array()}};
  EXPECT_FALSE((*chat)->Render(in).ok());
}

TEST(ChatTemplateRender, NamedTemplatesServeToolRequestsWithToolUse) {
  absl::StatusOr<std::unique_ptr<ChatTemplate>> chat = ChatTemplate::FromTexts(
      {{"default", "plain"}, {"tool_use", "tools: {{ tools | length }}"}}, "t", {});
  ASSERT_TRUE(chat.ok());
  ChatTemplateInputs in;
  in.messages = OrderedJson::array({{{"role", "user"}, {"content", "hi"}}});
  EXPECT_EQ(*(*chat)->Render(in), "plain");
  in.tools = OrderedJson::array({{{"type", "function"}}});
  EXPECT_EQ(*(*chat)->Render(in), "tools: 1");
}

}  // namespace
}  // namespace tpserve
