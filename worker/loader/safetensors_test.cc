#include "worker/loader/safetensors.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/fifo_testing.h"
#include "base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/loader/safetensors_writer.h"

namespace tpserve {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir ? dir : "/tmp", "/", name);
}

// Writes `bytes` as `name` and opens it.
absl::StatusOr<std::unique_ptr<SafetensorsFile>> OpenBytes(const std::string& name,
                                                          const std::string& bytes) {
  const std::string path = TempPath(name);
  TPSERVE_RETURN_IF_ERROR(WriteBinaryFile(path, bytes));
  return SafetensorsFile::Open(path);
}

// Opens a file made of `header` and `data` and returns the error message ("" if OK).
std::string OpenError(const std::string& name, const std::string& header,
                      const std::string& data = "") {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = OpenBytes(name, FrameSafetensors(header, data));
  return f.ok() ? "" : std::string(f.status().message());
}

TEST(SafetensorsTest, ReadsF32Bf16AndF16) {
  const std::string f16 = std::string("\x00\x3c\x00\xc0\x00\x38", 6);  // 1, -2, 0.5
  const std::string path = TempPath("ok.safetensors");
  ASSERT_TRUE(WriteSafetensors(path,
                               {{"a", DType::kF32, {2, 2}, F32Bytes({1, 2, 3, 4})},
                                {"b", DType::kBF16, {3}, Bf16Bytes({1.5f, -2, 0.25f})},
                                {"c", DType::kF16, {3}, f16}},
                               {{"format", "pt"}})
                  .ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  ASSERT_EQ((*file)->tensors().size(), 3u);

  const TensorView* a = (*file)->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->file, path);
  auto ta = TensorViewToFloat(*a, {2, 2});
  ASSERT_TRUE(ta.ok()) << ta.status();
  EXPECT_EQ(std::vector<float>(ta->data(), ta->data() + 4), std::vector<float>({1, 2, 3, 4}));

  auto tb = TensorViewToFloat(*(*file)->Find("b"), {3});
  ASSERT_TRUE(tb.ok());
  EXPECT_EQ(std::vector<float>(tb->data(), tb->data() + 3), std::vector<float>({1.5f, -2, 0.25f}));
  auto tc = TensorViewToFloat(*(*file)->Find("c"), {3});
  ASSERT_TRUE(tc.ok());
  EXPECT_EQ(std::vector<float>(tc->data(), tc->data() + 3), std::vector<float>({1, -2, 0.5f}));
  EXPECT_EQ((*file)->Find("missing"), nullptr);

  // One scratch tensor through all three, as a model load reads them.
  Tensor scratch;
  ASSERT_TRUE(TensorViewToFloatInto(*a, {2, 2}, &scratch).ok());
  EXPECT_EQ(std::vector<float>(scratch.data(), scratch.data() + 4),
            std::vector<float>({1, 2, 3, 4}));
  ASSERT_TRUE(TensorViewToFloatInto(*(*file)->Find("c"), {3}, &scratch).ok());
  EXPECT_EQ(scratch.shape(), (Shape{3}));
  EXPECT_EQ(std::vector<float>(scratch.data(), scratch.data() + 3),
            std::vector<float>({1, -2, 0.5f}));
  const absl::Status wrong = TensorViewToFloatInto(*a, {4}, &scratch);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong.message(), "tensor a in " + path + " has shape [2, 2], expected [4]");
}

TEST(SafetensorsTest, EmptyHeaderAndZeroElementTensorsAreValid) {
  EXPECT_EQ(OpenError("empty.safetensors", "{}"), "");
  EXPECT_EQ(OpenError("meta_null.safetensors", R"({"__metadata__": null})"), "");
  EXPECT_EQ(OpenError("zero.safetensors",
                      R"({"z": {"dtype": "F32", "shape": [0, 4], "data_offsets": [0, 0]},
                          "s": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}})",
                      std::string(4, '\0')),
            "");
}

TEST(SafetensorsTest, ConversionChecksShapeAndDtype) {
  const std::string path = TempPath("conv.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"w", DType::kF32, {2}, F32Bytes({1, 2})},
                                      {"i", DType::kI32, {1}, std::string(4, '\0')}})
                  .ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok());
  auto bad_shape = TensorViewToFloat(*(*file)->Find("w"), {1, 2});
  EXPECT_THAT(bad_shape.status().message(),
              AllOf(HasSubstr("w"), HasSubstr(path), HasSubstr("[2]"), HasSubstr("[1, 2]")));
  auto bad_dtype = TensorViewToFloat(*(*file)->Find("i"), {1});
  EXPECT_THAT(bad_dtype.status().message(), AllOf(HasSubstr("i"), HasSubstr("I32")));
}

// A NaN deep in a large tensor (converted on several threads) is found and placed.
TEST(SafetensorsTest, ConversionRefusesNonFiniteWeightsNamingTensorAndIndex) {
  const std::string path = TempPath("nan.safetensors");
  std::vector<float> values(64 * 1024, 0.25f);
  values[37 * 1024 + 5] = NAN;
  ASSERT_TRUE(WriteSafetensors(path, {{"model.norm.weight", DType::kBF16, {64, 1024},
                                       Bf16Bytes(values)}})
                  .ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok());
  auto converted = TensorViewToFloat(*(*file)->Find("model.norm.weight"), {64, 1024});
  EXPECT_EQ(converted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(converted.status().message(),
              AllOf(HasSubstr("model.norm.weight"), HasSubstr(path), HasSubstr("non-finite"),
                    HasSubstr("[37, 5]")));
}

TEST(SafetensorsTest, RejectsFilesTooShortForTheLength) {
  for (int size : {0, 1, 7}) {
    auto f = OpenBytes("short.safetensors", std::string(size, '\0'));
    EXPECT_THAT(f.status().message(),
                AllOf(HasSubstr("short.safetensors"), HasSubstr("too short for the 8-byte")))
        << size;
  }
}

TEST(SafetensorsTest, RejectsHeaderLengthOverTheLimit) {
  for (uint64_t n : {uint64_t{100'000'001}, ~uint64_t{0}, uint64_t{1} << 63}) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(n >> (8 * i));
    auto f = OpenBytes("huge.safetensors", bytes + "{}");
    EXPECT_THAT(f.status().message(),
                AllOf(HasSubstr("huge.safetensors"), HasSubstr("exceeds the limit of 100000000")));
  }
}

TEST(SafetensorsTest, RejectsTruncatedHeader) {
  const std::string full = FrameSafetensors(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})", "x");
  auto f = OpenBytes("trunc.safetensors", full.substr(0, 20));
  EXPECT_THAT(f.status().message(),
              AllOf(HasSubstr("trunc.safetensors"), HasSubstr("runs past the end of the file")));
}

TEST(SafetensorsTest, RejectsInvalidUtf8) {
  EXPECT_THAT(OpenError("utf8.safetensors", "{\"\xff\": 1}"),
              AllOf(HasSubstr("utf8.safetensors"), HasSubstr("not valid UTF-8")));
  EXPECT_THAT(OpenError("utf8b.safetensors", "{\"\xed\xa0\x80\": 1}"),  // a surrogate
              HasSubstr("not valid UTF-8"));
}

TEST(SafetensorsTest, RejectsMalformedOrNonObjectJson) {
  EXPECT_THAT(OpenError("garbage.safetensors", "{\"a\": [1,"),
              AllOf(HasSubstr("garbage.safetensors"), HasSubstr("not valid JSON")));
  EXPECT_THAT(OpenError("array.safetensors", "[1, 2]"),
              AllOf(HasSubstr("array.safetensors"), HasSubstr("expected a JSON object")));
  EXPECT_THAT(OpenError("dup.safetensors",
                        R"({"a": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]},
                            "a": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}})"),
              AllOf(HasSubstr("dup.safetensors"), HasSubstr("\"a\" appears twice")));
}

TEST(SafetensorsTest, RejectsMetadataThatIsNotAStringMap) {
  EXPECT_THAT(OpenError("meta.safetensors", R"({"__metadata__": {"format": 1}})"),
              AllOf(HasSubstr("meta.safetensors"), HasSubstr("\"__metadata__\" entry \"format\" must be a string")));
  EXPECT_THAT(OpenError("meta2.safetensors", R"({"__metadata__": ["pt"]})"),
              HasSubstr("\"__metadata__\" must be an object of strings"));
}

TEST(SafetensorsTest, RejectsMalformedEntries) {
  struct Case {
    const char* entry;
    const char* rule;
  };
  const Case cases[] = {
      {R"("x")", "entry must be an object"},
      {R"({"shape": [1], "data_offsets": [0, 4]})", "missing \"dtype\""},
      {R"({"dtype": "F32", "data_offsets": [0, 4]})", "missing \"shape\""},
      {R"({"dtype": "F32", "shape": [1]})", "missing \"data_offsets\""},
      {R"({"dtype": "F99", "shape": [1], "data_offsets": [0, 4]})", "unknown dtype \"F99\""},
      {R"({"dtype": 4, "shape": [1], "data_offsets": [0, 4]})", "\"dtype\" must be a string"},
      {R"({"dtype": "F32", "shape": 1, "data_offsets": [0, 4]})", "\"shape\" must be an array"},
      {R"({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]})", "got negative integer -1"},
      {R"({"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]})", "got floating-point number"},
      {R"({"dtype": "F32", "shape": ["1"], "data_offsets": [0, 4]})", "got string"},
      {R"({"dtype": "F32", "shape": [1e30], "data_offsets": [0, 4]})", "got floating-point number"},
      {R"({"dtype": "F32", "shape": [99999999999999999999], "data_offsets": [0, 4]})",
       "got floating-point number"},
      {R"({"dtype": "U8", "shape": [0, 9223372036854775808], "data_offsets": [0, 0]})",
       "value 9223372036854775808 exceeds"},
      {R"({"dtype": "F32", "shape": [1], "data_offsets": [0]})", "must be [begin, end], got 1"},
      {R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]})", "must be [begin, end], got 3"},
      {R"({"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]})", "got negative integer"},
      {R"({"dtype": "F32", "shape": [1], "data_offsets": [4, 0]})", "end before they begin"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(OpenError("entry.safetensors", absl::StrCat(R"({"t.w": )", c.entry, "}"),
                          std::string(4, '\0')),
                AllOf(HasSubstr("entry.safetensors"), HasSubstr("tensor \"t.w\""), HasSubstr(c.rule)))
        << c.entry;
  }
}

TEST(SafetensorsTest, RejectsSizeMismatch) {
  const std::string path = TempPath("model.safetensors");
  const std::string header =
      R"({"model.norm.weight": {"dtype": "F32", "shape": [64], "data_offsets": [0, 252]}})";
  auto f = OpenBytes("model.safetensors", FrameSafetensors(header, std::string(252, '\0')));
  EXPECT_EQ(f.status().message(),
            absl::StrCat(path, ": tensor \"model.norm.weight\": shape [64] × F32 needs 256 bytes "
                               "but data_offsets span 252"));
}

TEST(SafetensorsTest, RejectsShapeProductOverflow) {
  // 2^32 · 2^32 overflows 64 bits before the dtype size is applied.
  EXPECT_THAT(OpenError("ovf.safetensors",
                        R"({"w": {"dtype": "U8", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})"),
              AllOf(HasSubstr("ovf.safetensors"), HasSubstr("tensor \"w\""), HasSubstr("overflows")));
  // 2^62 elements fit, × 4 bytes does not.
  EXPECT_THAT(OpenError("ovf2.safetensors",
                        R"({"w": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 0]}})"),
              HasSubstr("overflows"));
  // 2^63 bytes fits in 64 bits and is simply a mismatch.
  EXPECT_THAT(OpenError("big.safetensors",
                        R"({"w": {"dtype": "U8", "shape": [2147483648, 4294967296], "data_offsets": [0, 4]}})",
                        std::string(4, '\0')),
              HasSubstr("needs 9223372036854775808 bytes but data_offsets span 4"));
}

TEST(SafetensorsTest, RejectsHolesAndOverlaps) {
  EXPECT_THAT(OpenError("start.safetensors",
                        R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}})",
                        std::string(4, '\0')),
              AllOf(HasSubstr("start.safetensors"), HasSubstr("tensor \"a\""), HasSubstr("leave a hole")));
  EXPECT_THAT(OpenError("hole.safetensors",
                        R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                            "b": {"dtype": "U8", "shape": [2], "data_offsets": [3, 5]}})",
                        std::string(5, '\0')),
              AllOf(HasSubstr("tensor \"b\""), HasSubstr("previous tensor ends at 2")));
  EXPECT_THAT(OpenError("overlap.safetensors",
                        R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                            "b": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}})",
                        std::string(4, '\0')),
              AllOf(HasSubstr("overlap.safetensors"), HasSubstr("overlap the previous tensor")));
}

TEST(SafetensorsTest, RequiresTheDataBufferToBeCoveredExactly) {
  const std::string header = R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})";
  EXPECT_THAT(OpenError("trailing.safetensors", header, std::string(5, '\0')),
              AllOf(HasSubstr("trailing.safetensors"),
                    HasSubstr("tensors cover 4 bytes of data but the file holds 5")));
  EXPECT_THAT(OpenError("missing.safetensors", header, std::string(3, '\0')),
              HasSubstr("tensors cover 4 bytes of data but the file holds 3"));
}

TEST(SafetensorsTest, RejectsMissingFileAndDirectory) {
  auto missing = SafetensorsFile::Open(TempPath("nope.safetensors"));
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_THAT(missing.status().message(), HasSubstr("nope.safetensors"));
  auto dir = SafetensorsFile::Open(TempPath(""));
  EXPECT_THAT(dir.status().message(), HasSubstr("not a regular file"));
}

TEST(SafetensorsTest, OpensAFileBehindASymlink) {
  // The Hugging Face hub cache: snapshots/<hash>/model.safetensors -> ../../blobs/<sha>.
  const std::string blob = TempPath("blob_linked");
  ASSERT_TRUE(WriteBinaryFile(blob, FrameSafetensors("{}", "")).ok());
  const std::string link = TempPath("linked.safetensors");
  ::unlink(link.c_str());
  ASSERT_EQ(::symlink(blob.c_str(), link.c_str()), 0);
  auto file = SafetensorsFile::Open(link);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE((*file)->tensors().empty());
}

TEST(SafetensorsTest, RefusesAFifoWithoutBlocking) {
  const std::string fifo = TempPath("fifo.safetensors");
  ASSERT_TRUE(MakeFifo(fifo));
  absl::Status status;
  EXPECT_TRUE(ReturnsWithin(absl::Seconds(5), fifo,
                            [&] { status = SafetensorsFile::Open(fifo).status(); }));
  EXPECT_EQ(status.message(), fifo + " is a FIFO, not a regular file");
}

TEST(SafetensorsTest, RefusesADeviceBehindASymlink) {
  const std::string link = TempPath("zero.safetensors");
  ::unlink(link.c_str());
  ASSERT_EQ(::symlink("/dev/zero", link.c_str()), 0);
  EXPECT_EQ(SafetensorsFile::Open(link).status().message(),
            link + " (-> /dev/zero) is a character device, not a regular file");
}

// Random bytes and random corruptions of a valid file must give a Status, never a crash.
TEST(SafetensorsTest, GarbageNeverCrashes) {
  std::mt19937 rng(7);
  const std::string valid = FrameSafetensors(
      R"({"__metadata__": {"k": "v"}, "a": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}})",
      std::string(8, '\x11'));
  for (int i = 0; i < 2000; ++i) {
    std::string bytes = valid;
    if (i % 2 == 0) {
      bytes.resize(rng() % 64);
      for (char& c : bytes) c = static_cast<char>(rng());
      if (bytes.size() >= 8 && i % 4 == 0) {  // a plausible length prefix
        const uint64_t n = rng() % (bytes.size() - 7);
        for (int k = 0; k < 8; ++k) bytes[k] = static_cast<char>(n >> (8 * k));
      }
    } else {
      for (int k = 0; k < 3; ++k) bytes[rng() % bytes.size()] = static_cast<char>(rng());
      if (i % 3 == 0) bytes.resize(rng() % bytes.size());
    }
    auto header = ParseSafetensorsHeader(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), "fuzz");
    if (!header.ok()) {
      EXPECT_THAT(header.status().message(), HasSubstr("fuzz"));
    }
  }
}

}  // namespace
}  // namespace tpserve
