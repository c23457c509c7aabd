// Renders the real chat templates of tests/chat_templates/ on their
// conversations and the probe templates ("env_cases"), and compares with the
// renders recorded from Python transformers (expected_renders.json), byte for
// byte. The conversation is prepared as apply_chat_template prepares it: keys
// whose value is null dropped, reasoning copied under its other names.
// Cases with continue_final_message (transformers edits the text around the
// render) are left to the serving code that implements that step.
#include <fstream>
#include <sstream>
#include <string>

#include "absl/time/civil_time.h"
#include "gtest/gtest.h"
#include "jinja/template.h"

namespace tpserve::jinja {
namespace {

using Json = nlohmann::ordered_json;

constexpr char kFixtures[] = "tests/chat_templates/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// transformers' _normalize_chat_messages and _alias_reasoning_fields.
Json PrepareMessages(const Json& messages) {
  Json out = Json::array();
  for (const Json& message : messages) {
    Json kept = Json::object();
    for (const auto& [key, value] : message.items()) {
      if (!value.is_null()) kept[key] = value;
    }
    const Json* reasoning = nullptr;
    for (const char* field : {"reasoning_content", "thinking", "reasoning"}) {
      if (reasoning == nullptr && kept.contains(field)) reasoning = &kept[field];
    }
    if (reasoning != nullptr) {
      Json aliased = Json::object();
      aliased["thinking"] = *reasoning;
      for (const auto& [key, value] : kept.items()) aliased[key] = value;
      aliased["reasoning_content"] = *reasoning;
      kept = std::move(aliased);
    }
    out.push_back(std::move(kept));
  }
  return out;
}

class RecordedRendersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    recorded_ = Json::parse(ReadFile(std::string(kFixtures) + "expected_renders.json"), nullptr, false);
    ASSERT_TRUE(recorded_.is_object()) << "expected_renders.json is missing or not JSON";
    absl::CivilSecond when;
    ASSERT_TRUE(absl::ParseCivilTime(recorded_["fixed_time"].get<std::string>(), &when));
    const absl::Time now = absl::FromCivil(when, absl::LocalTimeZone());
    options_.now = [now] { return now; };
  }

  // The render, or "ERR: " and the error's message.
  std::string Render(const std::string& source, const Json& context) const {
    absl::StatusOr<Template> t = Template::Parse(source, "chat_template");
    if (!t.ok()) return "ERR: " + std::string(t.status().message());
    absl::StatusOr<std::string> out = t->Render(context, options_);
    return out.ok() ? *out : "ERR: " + std::string(out.status().message());
  }

  void Expect(const Json& recorded, const std::string& got, const std::string& what) const {
    if (recorded.contains("output")) {
      EXPECT_EQ(got, recorded["output"].get<std::string>()) << what;
      return;
    }
    // "<ExceptionType>: <message>": raise_exception's message must come through.
    const std::string error = recorded["error"].get<std::string>();
    EXPECT_EQ(got.rfind("ERR: ", 0), 0u) << what << " should fail with " << error;
    if (error.rfind("TemplateError: ", 0) == 0) {
      EXPECT_NE(got.find(error.substr(15)), std::string::npos) << what << ": " << got;
    }
  }

  Json recorded_;
  RenderOptions options_;
};

TEST_F(RecordedRendersTest, ModelTemplatesOnConversations) {
  Json conversations = Json::object();
  for (const Json& c : recorded_["conversations"]) conversations[c["name"].get<std::string>()] = c;
  int rendered = 0;
  for (const Json& c : recorded_["cases"]) {
    const Json& kwargs = c["kwargs"];
    if (kwargs.value("continue_final_message", false) != false) continue;
    const Json& conversation = conversations[c["conversation"].get<std::string>()];
    Json context = Json::object();
    context["messages"] = PrepareMessages(conversation["messages"]);
    context["tools"] = conversation.value("tools", Json());
    context["documents"] = conversation.value("documents", Json());
    for (const auto& [key, value] : kwargs.items()) {
      if (key != "continue_final_message") context[key] = value;
    }
    const std::string file = c["template"].get<std::string>();
    const std::string source = ReadFile(std::string(kFixtures) + file);
    ASSERT_FALSE(source.empty()) << file;
    Expect(c, Render(source, context), file + " on " + c["conversation"].get<std::string>());
    ++rendered;
  }
  EXPECT_GT(rendered, 900);
}

TEST_F(RecordedRendersTest, ProbeTemplates) {
  for (const Json& c : recorded_["env_cases"]) {
    Expect(c, Render(c["template"].get<std::string>(), c["context"]), c["name"].get<std::string>());
  }
}

}  // namespace
}  // namespace tpserve::jinja
