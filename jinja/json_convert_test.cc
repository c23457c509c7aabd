// Python's json.dumps (the expected strings are its output) and FromJson.
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "jinja/json_convert.h"

namespace tpserve::jinja {
namespace {

Value Parse(const char* json) { return *FromJson(nlohmann::ordered_json::parse(json)); }

std::string Dump(const Value& v, JsonDumpOptions options = {}) {
  absl::StatusOr<std::string> out = PyJsonDumps(v, options);
  return out.ok() ? *out : "ERR: " + std::string(out.status().message());
}

TEST(PyJsonDumpsTest, MatchesJsonDumpsDefaults) {
  const Value v = Parse(R"({"a": 1, "b": [1, 2.5, null, true, false], "c": {"d": "\u00e9\n\"\\"}})");
  EXPECT_EQ(Dump(v), "{\"a\": 1, \"b\": [1, 2.5, null, true, false], \"c\": {\"d\": \"\xc3\xa9\\n\\\"\\\\\"}}");
  JsonDumpOptions ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(Dump(v, ascii), "{\"a\": 1, \"b\": [1, 2.5, null, true, false], \"c\": {\"d\": \"\\u00e9\\n\\\"\\\\\"}}");
}

TEST(PyJsonDumpsTest, IndentsAsJsonDumps) {
  JsonDumpOptions indent;
  indent.indent = "  ";
  EXPECT_EQ(Dump(Parse(R"({"a": 1, "b": [1, []], "c": {}})"), indent),
            "{\n  \"a\": 1,\n  \"b\": [\n    1,\n    []\n  ],\n  \"c\": {}\n}");
  JsonDumpOptions tab_sorted;
  tab_sorted.indent = "\t";
  tab_sorted.sort_keys = true;
  EXPECT_EQ(Dump(Parse(R"({"z": 1, "a": {"y": 2, "b": 3}})"), tab_sorted),
            "{\n\t\"a\": {\n\t\t\"b\": 3,\n\t\t\"y\": 2\n\t},\n\t\"z\": 1\n}");
}

TEST(PyJsonDumpsTest, SeparatorsNumbersAndEscapes) {
  JsonDumpOptions compact;
  compact.item_separator = ",";
  compact.key_separator = ":";
  EXPECT_EQ(Dump(Parse(R"({"a": [1.0, -0.0, 1e16]})"), compact), "{\"a\":[1.0,-0.0,1e+16]}");
  EXPECT_EQ(Dump(Value::String("\xe2\x80\xa8\x7f\x01")), "\"\xe2\x80\xa8\x7f\\u0001\"");
  JsonDumpOptions ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(Dump(Value::String("\xe2\x80\xa8\x7f\x01"), ascii), "\"\\u2028\\u007f\\u0001\"");
  EXPECT_EQ(Dump(Value::String("\xf0\x9f\x98\x80"), ascii), "\"\\ud83d\\ude00\"");
  EXPECT_EQ(Dump(Value::List({Value::Float(std::numeric_limits<double>::quiet_NaN()),
                              Value::Float(std::numeric_limits<double>::infinity())})),
            "[NaN, Infinity]");
}

TEST(PyJsonDumpsTest, KeysAndUnserializableValues) {
  ValueMap map;
  map.Set(Value::Int(1), Value::String("a"));
  map.Set(Value::Float(2.5), Value::String("b"));
  map.Set(Value::Bool(true), Value::String("c"));  // the same key as 1, as in Python
  map.Set(Value::None(), Value::String("d"));
  EXPECT_EQ(Dump(Value::Dict(map)), "{\"1\": \"c\", \"2.5\": \"b\", \"null\": \"d\"}");
  EXPECT_EQ(Dump(Value()), "ERR: Object of type Undefined is not JSON serializable");
  EXPECT_EQ(Dump(Value::Namespace({})), "ERR: Object of type Namespace is not JSON serializable");
  ValueMap tuple_key;
  tuple_key.Set(Value::Tuple({}), Value::Int(1));
  EXPECT_EQ(Dump(Value::Dict(tuple_key)), "ERR: keys must be str, int, float, bool or None, not tuple");
}

TEST(FromJsonTest, KeepsOrderAndNumberKinds) {
  const Value v = Parse(R"({"z": 1, "a": 2.0, "m": [1, 1.5, "s", null, true]})");
  ASSERT_TRUE(v.is_dict());
  EXPECT_EQ(v.Str(), "{'z': 1, 'a': 2.0, 'm': [1, 1.5, 's', None, True]}");
  EXPECT_EQ(Parse("18446744073709551615").Str(), "1.8446744073709552e+19");
}

TEST(FromJsonTest, RefusesDeepNesting) {
  std::string deep(kMaxValueDepth + 5, '[');
  deep += std::string(kMaxValueDepth + 5, ']');
  absl::StatusOr<Value> v = FromJson(nlohmann::ordered_json::parse(deep));
  EXPECT_FALSE(v.ok());
}

}  // namespace
}  // namespace tpserve::jinja
