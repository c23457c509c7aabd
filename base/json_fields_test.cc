#include "base/json_fields.h"

#include <string>

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

using nlohmann::json;

// Parsed from text, as the loaders read files: non-negative integers are unsigned.
const json& Doc() {
  static const json* doc = new json(json::parse(R"({
    "name": "llama", "flag": true, "count": 7, "negative": -3, "ratio": 0.5,
    "float_int": 4.0, "nothing": null, "list": [10, "x"], "huge": 18446744073709551615,
    "int32_max": 2147483647, "int32_min": -2147483648,
    "above_int32": 2147483648, "below_int32": -2147483649,
    "rope_scaling": {"factor": "big", "inner": [{"pattern": 1}]}
  })"));
  return *doc;
}

// Errors read `config.json: key "..."`.
JsonField File() { return JsonField(Doc(), "config.json"); }
// Errors read `tokenizer.x: ...`.
JsonField Bare() { return JsonField(Doc(), "", "tokenizer"); }

// The message of an INVALID_ARGUMENT status, or why it is not one.
std::string ErrorOf(const absl::Status& status) {
  if (status.ok()) return "<ok>";
  if (!absl::IsInvalidArgument(status)) return status.ToString();
  return std::string(status.message());
}
template <typename T>
std::string ErrorOf(const absl::StatusOr<T>& result) {
  return ErrorOf(result.status());
}

TEST(JsonFieldTest, PathsNameNestedMembersAndElements) {
  EXPECT_EQ(File().path(), "");
  EXPECT_EQ(File()["name"].path(), "name");
  EXPECT_EQ(File()["rope_scaling"]["inner"].At(0)["pattern"].path(),
            "rope_scaling.inner[0].pattern");
  EXPECT_EQ(Bare()["list"].At(1).path(), "tokenizer.list[1]");
  EXPECT_EQ(File()["rope_scaling"]["factor"].source(), "config.json");
  EXPECT_EQ(*File()["rope_scaling"]["inner"].At(0)["pattern"].Int(), 1);
}

TEST(JsonFieldTest, MissingMembersAndElementsReadAsNull) {
  EXPECT_TRUE(File().Has("nothing"));  // present, as null
  EXPECT_TRUE(File()["nothing"].is_null());
  EXPECT_FALSE(File().Has("absent"));
  EXPECT_TRUE(File()["absent"].is_null());
  EXPECT_FALSE(File()["name"].Has("name"));  // not an object
  EXPECT_TRUE(File()["name"]["sub"].is_null());
  EXPECT_EQ(File()["name"]["sub"].path(), "name.sub");
  EXPECT_TRUE(File()["list"].At(2).is_null());
  EXPECT_TRUE(File()["name"].At(0).is_null());
  EXPECT_FALSE(File()["list"].At(1).is_null());
}

TEST(JsonFieldTest, String) {
  EXPECT_EQ(*File()["name"].String(), "llama");
  EXPECT_EQ(ErrorOf(File()["count"].String()),
            "config.json: key \"count\": expected a string, got non-negative integer");
  EXPECT_EQ(ErrorOf(File()["absent"].String()), "config.json: missing required key \"absent\"");
  EXPECT_EQ(ErrorOf(File()["nothing"].String()), "config.json: missing required key \"nothing\"");
  EXPECT_EQ(*File()["absent"].StringOr("default"), "default");
  EXPECT_EQ(*File()["nothing"].StringOr("default"), "default");
  EXPECT_EQ(*File()["name"].StringOr("default"), "llama");
  EXPECT_EQ(ErrorOf(File()["flag"].StringOr("default")),
            "config.json: key \"flag\": expected a string, got boolean");
}

TEST(JsonFieldTest, Bool) {
  EXPECT_EQ(*File()["flag"].Bool(), true);
  EXPECT_EQ(ErrorOf(File()["count"].Bool()),
            "config.json: key \"count\": expected a boolean, got non-negative integer");
  EXPECT_EQ(ErrorOf(File()["absent"].Bool()), "config.json: missing required key \"absent\"");
  EXPECT_EQ(*File()["absent"].BoolOr(false), false);
  EXPECT_EQ(*File()["flag"].BoolOr(false), true);
  EXPECT_EQ(ErrorOf(File()["name"].BoolOr(false)),
            "config.json: key \"name\": expected a boolean, got string");
}

TEST(JsonFieldTest, Int) {
  EXPECT_EQ(*File()["count"].Int(), 7);
  EXPECT_EQ(*File()["negative"].Int(), -3);
  EXPECT_EQ(*File()["above_int32"].Int(), int64_t{2147483648});
  EXPECT_EQ(ErrorOf(File()["float_int"].Int()),
            "config.json: key \"float_int\": expected an integer, got floating-point number");
  EXPECT_EQ(ErrorOf(File()["name"].Int()),
            "config.json: key \"name\": expected an integer, got string");
  EXPECT_EQ(ErrorOf(File()["huge"].Int()),
            "config.json: key \"huge\": value 18446744073709551615 is out of range");
  EXPECT_EQ(ErrorOf(File()["absent"].Int()), "config.json: missing required key \"absent\"");
  EXPECT_EQ(*File()["absent"].IntOr(-1), -1);
  EXPECT_EQ(*File()["count"].IntOr(-1), 7);
  EXPECT_EQ(ErrorOf(File()["ratio"].IntOr(-1)),
            "config.json: key \"ratio\": expected an integer, got floating-point number");
}

TEST(JsonFieldTest, Int32) {
  EXPECT_EQ(*File()["int32_max"].Int32(), 2147483647);
  EXPECT_EQ(*File()["int32_min"].Int32(), -2147483647 - 1);
  EXPECT_EQ(ErrorOf(File()["above_int32"].Int32()),
            "config.json: key \"above_int32\": value 2147483648 is out of range");
  EXPECT_EQ(ErrorOf(File()["below_int32"].Int32()),
            "config.json: key \"below_int32\": value -2147483649 is out of range");
  EXPECT_EQ(ErrorOf(File()["name"].Int32()),
            "config.json: key \"name\": expected an integer, got string");
  EXPECT_EQ(ErrorOf(File()["absent"].Int32()), "config.json: missing required key \"absent\"");
  EXPECT_EQ(*File()["nothing"].Int32Or(5), 5);
  EXPECT_EQ(*File()["count"].Int32Or(5), 7);
  EXPECT_EQ(ErrorOf(File()["above_int32"].Int32Or(5)),
            "config.json: key \"above_int32\": value 2147483648 is out of range");
}

TEST(JsonFieldTest, Double) {
  EXPECT_EQ(*File()["ratio"].Double(), 0.5);
  EXPECT_EQ(*File()["count"].Double(), 7.0);  // an integer is a number too
  EXPECT_EQ(*File()["negative"].Double(), -3.0);
  EXPECT_EQ(ErrorOf(File()["name"].Double()),
            "config.json: key \"name\": expected a number, got string");
  EXPECT_EQ(ErrorOf(File()["absent"].Double()), "config.json: missing required key \"absent\"");
  EXPECT_EQ(*File()["absent"].DoubleOr(1e-6), 1e-6);
  EXPECT_EQ(ErrorOf(File()["flag"].DoubleOr(1e-6)),
            "config.json: key \"flag\": expected a number, got boolean");
}

TEST(JsonFieldTest, ArrayAndObject) {
  EXPECT_TRUE(File()["list"].ExpectArray().ok());
  EXPECT_TRUE(File()["rope_scaling"].ExpectObject().ok());
  EXPECT_TRUE(File().ExpectObject().ok());
  EXPECT_EQ(ErrorOf(File()["name"].ExpectArray()),
            "config.json: key \"name\": expected an array, got string");
  EXPECT_EQ(ErrorOf(File()["list"].ExpectObject()),
            "config.json: key \"list\": expected an object, got array");
  // Null is a wrong type for a container, not a missing key.
  EXPECT_EQ(ErrorOf(File()["absent"].ExpectObject()),
            "config.json: key \"absent\": expected an object, got null");
  EXPECT_EQ(ErrorOf(File()["absent"].ExpectArray()),
            "config.json: key \"absent\": expected an array, got null");
}

TEST(JsonFieldTest, NestedKeysInErrors) {
  EXPECT_EQ(ErrorOf(File()["rope_scaling"]["factor"].Double()),
            "config.json: key \"rope_scaling.factor\": expected a number, got string");
  EXPECT_EQ(ErrorOf(File()["rope_scaling"]["low_freq_factor"].Double()),
            "config.json: missing required key \"rope_scaling.low_freq_factor\"");
  EXPECT_EQ(ErrorOf(File()["rope_scaling"]["inner"].At(0)["pattern"].String()),
            "config.json: key \"rope_scaling.inner[0].pattern\": expected a string, got "
            "non-negative integer");
}

TEST(JsonFieldTest, WithoutSourceErrorsLeadWithThePath) {
  EXPECT_EQ(ErrorOf(Bare()["rope_scaling"]["inner"].At(0)["pattern"].String()),
            "tokenizer.rope_scaling.inner[0].pattern: expected a string, got non-negative "
            "integer");
  EXPECT_EQ(ErrorOf(Bare()["list"].At(1).Int()),
            "tokenizer.list[1]: expected an integer, got string");
  EXPECT_EQ(ErrorOf(Bare()["absent"].Bool()), "missing required key \"tokenizer.absent\"");
  EXPECT_EQ(ErrorOf(Bare()["huge"].Int32()),
            "tokenizer.huge: value 18446744073709551615 is out of range");
  EXPECT_EQ(ErrorOf(Bare()["absent"].ExpectObject()),
            "tokenizer.absent: expected an object, got null");
  const JsonField root(Doc());
  EXPECT_EQ(ErrorOf(root["model"].ExpectObject()), "model: expected an object, got null");
}

TEST(JsonFieldTest, ErrorNamesTheFieldWithTheGivenCode) {
  EXPECT_EQ(ErrorOf(File()["name"].Error("unsupported architecture")),
            "config.json: key \"name\": unsupported architecture");
  EXPECT_EQ(ErrorOf(Bare()["name"].Error("'llama' is not supported")),
            "tokenizer.name: 'llama' is not supported");
  const absl::Status unimplemented =
      File()["rope_scaling"]["type"].Error("not supported", absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::IsUnimplemented(unimplemented));
  EXPECT_EQ(unimplemented.message(), "config.json: key \"rope_scaling.type\": not supported");
  EXPECT_EQ(ErrorOf(File()["x"].Missing()), "config.json: missing required key \"x\"");
}

TEST(JsonFieldTest, JsonTypeName) {
  EXPECT_EQ(JsonTypeName(Doc()["count"]), "non-negative integer");
  EXPECT_EQ(JsonTypeName(Doc()["negative"]), "negative integer");
  EXPECT_EQ(JsonTypeName(Doc()["ratio"]), "floating-point number");
  EXPECT_EQ(JsonTypeName(Doc()["name"]), "string");
  EXPECT_EQ(JsonTypeName(Doc()["nothing"]), "null");
  EXPECT_EQ(JsonTypeName(Doc()["list"]), "array");
  EXPECT_EQ(JsonTypeName(Doc()["rope_scaling"]), "object");
  EXPECT_EQ(JsonTypeName(Doc()["flag"]), "boolean");
}

}  // namespace
}  // namespace tpserve
