#include "worker/loader/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/fifo_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/loader/safetensors_writer.h"

namespace tpserve {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A fresh directory under TEST_TMPDIR per test.
std::string MakeDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/", name);
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

SafetensorsTensor F32(const std::string& name, Shape shape, std::vector<float> values) {
  return {name, DType::kF32, std::move(shape), F32Bytes(values)};
}

// Two shards: embed + norm in shard 1, lm_head in shard 2.
std::string WriteShards(const std::string& name) {
  const std::string dir = MakeDir(name);
  EXPECT_TRUE(WriteSafetensors(dir + "/model-00001-of-00002.safetensors",
                               {F32("embed", {2, 2}, {1, 2, 3, 4}), F32("norm", {2}, {5, 6})})
                  .ok());
  EXPECT_TRUE(WriteSafetensors(dir + "/model-00002-of-00002.safetensors",
                               {{"lm_head", DType::kBF16, {2}, Bf16Bytes({7, 8})}})
                  .ok());
  return dir;
}

const std::map<std::string, std::string> kWeightMap = {
    {"embed", "model-00001-of-00002.safetensors"},
    {"norm", "model-00001-of-00002.safetensors"},
    {"lm_head", "model-00002-of-00002.safetensors"},
};

std::string OpenError(const std::string& dir) {
  auto c = Checkpoint::Open(dir);
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(CheckpointTest, OpensSingleFile) {
  const std::string dir = MakeDir("single");
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors",
                               {F32("b", {3}, {1, 2, 3}), F32("a", {1}, {9})})
                  .ok());
  auto c = Checkpoint::Open(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT((*c)->TensorNames(), ElementsAre("a", "b"));
  EXPECT_TRUE((*c)->Contains("b"));
  EXPECT_FALSE((*c)->Contains("c"));
  auto view = (*c)->Get("b");
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->file, dir + "/model.safetensors");
  EXPECT_EQ(view->nbytes, 12u);
  auto t = (*c)->GetFloat("b", {3});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->data()[2], 3.0f);
}

TEST(CheckpointTest, OpensShardedIndex) {
  const std::string dir = WriteShards("sharded");
  ASSERT_TRUE(WriteSafetensorsIndex(dir + "/model.safetensors.index.json", kWeightMap).ok());
  auto c = Checkpoint::Open(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT((*c)->TensorNames(), ElementsAre("embed", "lm_head", "norm"));
  auto head = (*c)->GetFloat("lm_head", {2});
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->data()[0], 7.0f);
  EXPECT_EQ(head->data()[1], 8.0f);
  EXPECT_EQ((*c)->Get("lm_head")->file, dir + "/model-00002-of-00002.safetensors");
}

TEST(CheckpointTest, GetErrorsNameTensorFileAndShapes) {
  const std::string dir = WriteShards("get_errors");
  ASSERT_TRUE(WriteSafetensorsIndex(dir + "/model.safetensors.index.json", kWeightMap).ok());
  auto c = Checkpoint::Open(dir);
  ASSERT_TRUE(c.ok());
  auto missing = (*c)->Get("nope");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_THAT(missing.status().message(), AllOf(HasSubstr("nope"), HasSubstr(dir)));
  auto shape = (*c)->GetFloat("embed", {4});
  EXPECT_EQ(shape.status().message(),
            absl::StrCat("tensor embed in ", dir,
                         "/model-00001-of-00002.safetensors has shape [2, 2], expected [4]"));
}

TEST(CheckpointTest, RejectsNonFloatDtype) {
  const std::string dir = MakeDir("int_dtype");
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors",
                               {{"ids", DType::kI64, {1}, std::string(8, '\0')}})
                  .ok());
  auto c = Checkpoint::Open(dir);
  ASSERT_TRUE(c.ok());
  EXPECT_THAT((*c)->GetFloat("ids", {1}).status().message(),
              AllOf(HasSubstr("ids"), HasSubstr("I64")));
}

TEST(CheckpointTest, RejectsEmptyDirectory) {
  EXPECT_THAT(OpenError(MakeDir("empty")),
              AllOf(HasSubstr("model.safetensors"), HasSubstr("model.safetensors.index.json")));
}

TEST(CheckpointTest, PropagatesHeaderErrors) {
  const std::string dir = MakeDir("bad_single");
  ASSERT_TRUE(WriteBinaryFile(dir + "/model.safetensors", "garbage!garbage").ok());
  EXPECT_THAT(OpenError(dir), AllOf(HasSubstr("model.safetensors"), HasSubstr("header length")));
}

TEST(CheckpointTest, IndexRejectsMissingShard) {
  const std::string dir = WriteShards("missing_shard");
  auto map = kWeightMap;
  map["lm_head"] = "model-00003-of-00002.safetensors";
  ASSERT_TRUE(WriteSafetensorsIndex(dir + "/model.safetensors.index.json", map).ok());
  EXPECT_THAT(OpenError(dir), AllOf(HasSubstr("model.safetensors.index.json"),
                                    HasSubstr("shard model-00003-of-00002.safetensors"),
                                    HasSubstr("does not exist")));
}

TEST(CheckpointTest, IndexRejectsTensorNotInNamedShard) {
  const std::string dir = WriteShards("wrong_shard");
  auto map = kWeightMap;
  map["norm"] = "model-00002-of-00002.safetensors";
  ASSERT_TRUE(WriteSafetensorsIndex(dir + "/model.safetensors.index.json", map).ok());
  EXPECT_THAT(OpenError(dir), AllOf(HasSubstr("model.safetensors.index.json"),
                                    HasSubstr("tensor \"norm\" in model-00002-of-00002"),
                                    HasSubstr("does not hold it")));

  map = kWeightMap;
  map["ghost"] = "model-00002-of-00002.safetensors";
  ASSERT_TRUE(WriteSafetensorsIndex(dir + "/model.safetensors.index.json", map).ok());
  EXPECT_THAT(OpenError(dir), AllOf(HasSubstr("tensor \"ghost\""), HasSubstr("does not hold it")));
}

TEST(CheckpointTest, IndexRejectsTensorMissingFromWeightMap) {
  const std::string dir = WriteShards("unlisted");
  auto map = kWeightMap;
  map.erase("norm");
  ASSERT_TRUE(WriteSafetensorsIndex(dir + "/model.safetensors.index.json", map).ok());
  EXPECT_THAT(OpenError(dir), AllOf(HasSubstr("tensor \"norm\""), HasSubstr("not in weight_map")));
}

TEST(CheckpointTest, IndexRejectsTensorInTwoShards) {
  const std::string dir = WriteShards("duplicate");
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00002-of-00002.safetensors",
                               {{"lm_head", DType::kBF16, {2}, Bf16Bytes({7, 8})},
                                F32("norm", {2}, {5, 6})})
                  .ok());
  ASSERT_TRUE(WriteSafetensorsIndex(dir + "/model.safetensors.index.json", kWeightMap).ok());
  EXPECT_THAT(OpenError(dir), AllOf(HasSubstr("tensor \"norm\" is in two shards"),
                                    HasSubstr("model-00001-of-00002.safetensors"),
                                    HasSubstr("model-00002-of-00002.safetensors")));
  // The same tensor twice in weight_map, naming two shards.
  ASSERT_TRUE(WriteBinaryFile(dir + "/model.safetensors.index.json",
                              R"({"weight_map": {"norm": "model-00001-of-00002.safetensors",
                                                 "norm": "model-00002-of-00002.safetensors"}})")
                  .ok());
  EXPECT_THAT(OpenError(dir), AllOf(HasSubstr("model.safetensors.index.json"),
                                    HasSubstr("\"norm\" appears twice")));
}

TEST(CheckpointTest, IndexRejectsInvalidShardFile) {
  const std::string dir = WriteShards("bad_shard");
  ASSERT_TRUE(WriteBinaryFile(dir + "/model-00002-of-00002.safetensors", "short").ok());
  ASSERT_TRUE(WriteSafetensorsIndex(dir + "/model.safetensors.index.json", kWeightMap).ok());
  EXPECT_THAT(OpenError(dir), AllOf(HasSubstr("model-00002-of-00002.safetensors"),
                                    HasSubstr("too short")));
}

TEST(CheckpointTest, IndexRejectsMalformedJson) {
  const std::string dir = WriteShards("bad_index");
  const std::string index = dir + "/model.safetensors.index.json";
  const std::pair<const char*, const char*> cases[] = {
      {"{\"weight_map\": {", "not valid JSON"},
      {"[]", "expected a JSON object"},
      {"{\"metadata\": {}}", "missing \"weight_map\""},
      {"{\"weight_map\": []}", "\"weight_map\" must be an object"},
      {"{\"weight_map\": {\"norm\": 3}}", "tensor \"norm\" must be a file name string"},
      {"{\"weight_map\": {\"norm\": \"../x.safetensors\"}}", "not a relative path"},
      {"{\"weight_map\": {\"norm\": \"/etc/passwd\"}}", "not a relative path"},
  };
  for (const auto& [text, rule] : cases) {
    ASSERT_TRUE(WriteBinaryFile(index, text).ok());
    EXPECT_THAT(OpenError(dir), AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr(rule)))
        << text;
  }
}

TEST(CheckpointTest, OpensAHubCacheSnapshotOfSymlinks) {
  // huggingface_hub's layout: snapshots/<commit>/<file> -> ../../blobs/<sha256>.
  const std::string repo = MakeDir("hub_repo");
  const std::string blobs = MakeDir("hub_repo/blobs");
  const std::string shards = WriteShards("hub_repo/blobs_src");
  ASSERT_TRUE(WriteSafetensorsIndex(shards + "/model.safetensors.index.json", kWeightMap).ok());
  MakeDir("hub_repo/snapshots");
  const std::string snapshot = MakeDir("hub_repo/snapshots/0123abcd");
  int blob = 0;
  for (const char* name : {"model.safetensors.index.json", "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors"}) {
    const std::string sha = absl::StrCat("sha", blob++);
    ASSERT_EQ(::rename((shards + "/" + name).c_str(), (blobs + "/" + sha).c_str()), 0);
    ASSERT_EQ(::symlink(("../../blobs/" + sha).c_str(), (snapshot + "/" + name).c_str()), 0);
  }
  auto c = Checkpoint::Open(snapshot);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT((*c)->TensorNames(), ElementsAre("embed", "lm_head", "norm"));
}

TEST(CheckpointTest, RefusesAFifoIndexWithoutBlocking) {
  const std::string dir = WriteShards("fifo_index");
  const std::string index = dir + "/model.safetensors.index.json";
  ASSERT_TRUE(MakeFifo(index));
  std::string error;
  EXPECT_TRUE(ReturnsWithin(absl::Seconds(5), index, [&] { error = OpenError(dir); }));
  EXPECT_EQ(error, index + " is a FIFO, not a regular file");
}

TEST(CheckpointTest, RefusesAFifoShardWithoutBlocking) {
  const std::string dir = WriteShards("fifo_shard");
  ASSERT_TRUE(WriteSafetensorsIndex(dir + "/model.safetensors.index.json", kWeightMap).ok());
  const std::string shard = dir + "/model-00002-of-00002.safetensors";
  ASSERT_TRUE(MakeFifo(shard));
  std::string error;
  EXPECT_TRUE(ReturnsWithin(absl::Seconds(5), shard, [&] { error = OpenError(dir); }));
  EXPECT_EQ(error, shard + " is a FIFO, not a regular file");
}

TEST(CheckpointTest, RefusesAnIndexOver64MiB) {
  const std::string dir = WriteShards("huge_index");
  const std::string index = dir + "/model.safetensors.index.json";
  // Sparse: fstat reports the size, nothing is written.
  const int fd = ::open(index.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, (64 << 20) + 1), 0);
  ::close(fd);
  EXPECT_EQ(OpenError(dir), index + " is 67108865 bytes, over the cap of 67108864 bytes");
}

}  // namespace
}  // namespace tpserve
