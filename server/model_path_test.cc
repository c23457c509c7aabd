#include "server/model_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/regular_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kMain[] = "0123456789abcdef0123456789abcdef01234567";
constexpr char kOther[] = "fedcba9876543210fedcba9876543210fedcba98";

std::string MkdirP(const std::string& dir) {
  std::string partial;
  for (absl::string_view part : absl::StrSplit(dir, '/')) {
    absl::StrAppend(&partial, part, "/");
    ::mkdir(partial.c_str(), 0755);
  }
  return dir;
}

std::string TempDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return MkdirP(absl::StrCat(tmp ? tmp : "/tmp", "/", name));
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// huggingface_hub's layout under `root`: refs/main -> kMain, refs/v1 -> kOther, each
// snapshot's config.json a relative symlink into blobs/.
std::string MakeCache(const std::string& root) {
  const std::string repo = MkdirP(root + "/models--Qwen--Tiny-0.5B");
  MkdirP(repo + "/refs");
  MkdirP(repo + "/blobs");
  Write(repo + "/refs/main", kMain);  // no newline, as huggingface_hub writes it
  Write(repo + "/refs/v1", absl::StrCat(kOther, "\n"));
  for (const char* commit : {kMain, kOther}) {
    const std::string snapshot = MkdirP(absl::StrCat(repo, "/snapshots/", commit));
    const std::string blob = absl::StrCat(commit, ".blob");
    Write(absl::StrCat(repo, "/blobs/", blob), absl::StrCat("{\"commit\": \"", commit, "\"}"));
    ::unlink((snapshot + "/config.json").c_str());
    EXPECT_EQ(::symlink(("../../blobs/" + blob).c_str(), (snapshot + "/config.json").c_str()), 0);
  }
  return repo;
}

EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(ModelPathTest, ADirectoryIsUsedAsItIs) {
  const std::string repo = MakeCache(TempDir("as_is/hub"));
  const std::string snapshot = absl::StrCat(repo, "/snapshots/", kMain);
  absl::StatusOr<ModelPath> path = ResolveModelPath(snapshot, Env({}));
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(path->dir, snapshot);
  EXPECT_EQ(path->hub_id, "");
}

TEST(ModelPathTest, AHubIdResolvesThroughRefsMainToASnapshot) {
  const std::string root = TempDir("main/hub");
  const std::string repo = MakeCache(root);
  absl::StatusOr<ModelPath> path =
      ResolveModelPath("Qwen/Tiny-0.5B", Env({{"HF_HUB_CACHE", root}}));
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(path->dir, absl::StrCat(repo, "/snapshots/", kMain));
  EXPECT_EQ(path->hub_id, "Qwen/Tiny-0.5B");
  // The snapshot's files are symlinks into blobs/, and they read.
  absl::StatusOr<std::string> config = ReadRegularFile(path->dir + "/config.json", 1024);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(*config, HasSubstr(kMain));
}

TEST(ModelPathTest, ARevisionNamesARefOrACommit) {
  const std::string root = TempDir("revision/hub");
  const std::string repo = MakeCache(root);
  for (const std::string& revision : {std::string("v1"), std::string(kOther)}) {
    absl::StatusOr<ModelPath> path =
        ResolveModelPath("Qwen/Tiny-0.5B@" + revision, Env({{"HF_HUB_CACHE", root}}));
    ASSERT_TRUE(path.ok()) << revision << ": " << path.status();
    EXPECT_EQ(path->dir, absl::StrCat(repo, "/snapshots/", kOther));
    EXPECT_EQ(path->hub_id, "Qwen/Tiny-0.5B");
  }
}

TEST(ModelPathTest, TheCacheRootIsChosenAsHuggingFaceHubChoosesIt) {
  const std::string base = TempDir("roots");
  MakeCache(base + "/explicit");
  MakeCache(base + "/hf_home/hub");
  MakeCache(base + "/xdg/huggingface/hub");
  MakeCache(base + "/home/.cache/huggingface/hub");
  const std::map<std::string, std::string> all = {{"HF_HUB_CACHE", base + "/explicit"},
                                                  {"HF_HOME", base + "/hf_home"},
                                                  {"XDG_CACHE_HOME", base + "/xdg"},
                                                  {"HOME", base + "/home"}};
  const std::pair<const char*, std::string> order[] = {
      {"HF_HUB_CACHE", base + "/explicit"},
      {"HF_HOME", base + "/hf_home/hub"},
      {"XDG_CACHE_HOME", base + "/xdg/huggingface/hub"},
      {"HOME", base + "/home/.cache/huggingface/hub"}};
  std::map<std::string, std::string> vars = all;
  for (const auto& [variable, root] : order) {
    absl::StatusOr<ModelPath> path = ResolveModelPath("Qwen/Tiny-0.5B", Env(vars));
    ASSERT_TRUE(path.ok()) << variable << ": " << path.status();
    EXPECT_EQ(path->dir, absl::StrCat(root, "/models--Qwen--Tiny-0.5B/snapshots/", kMain))
        << variable;
    vars[variable] = "";  // empty counts as unset
  }
}

TEST(ModelPathTest, NotFoundNamesEveryPlaceLooked) {
  const std::string root = TempDir("missing/hub");
  absl::StatusOr<ModelPath> path =
      ResolveModelPath("Qwen/Absent-1B", Env({{"HF_HOME", TempDir("missing")}}));
  EXPECT_TRUE(absl::IsNotFound(path.status())) << path.status();
  EXPECT_EQ(path.status().message(),
            absl::StrCat("--model Qwen/Absent-1B not found: no directory Qwen/Absent-1B; in the "
                         "Hugging Face hub cache ", root, " (chosen by $HF_HOME/hub; HF_HUB_CACHE "
                         "unset): no directory ", root, "/models--Qwen--Absent-1B. tpserve never "
                         "downloads: fetch it first, e.g. huggingface-cli download "
                         "Qwen/Absent-1B"));

  path = ResolveModelPath("Qwen/Absent-1B", Env({{"HOME", "/nowhere"}}));
  EXPECT_THAT(std::string(path.status().message()),
              AllOf(HasSubstr("no directory Qwen/Absent-1B"),
                    HasSubstr("/nowhere/.cache/huggingface/hub/models--Qwen--Absent-1B"),
                    HasSubstr("chosen by $HOME/.cache/huggingface/hub; HF_HUB_CACHE, HF_HOME, "
                              "XDG_CACHE_HOME unset")));

  path = ResolveModelPath("Qwen/Absent-1B", Env({}));
  EXPECT_THAT(std::string(path.status().message()), HasSubstr("all unset"));
}

TEST(ModelPathTest, AMissingRefOrSnapshotIsNamed) {
  const std::string root = TempDir("dangling/hub");
  const std::string repo = MakeCache(root);
  absl::StatusOr<ModelPath> path =
      ResolveModelPath("Qwen/Tiny-0.5B@v2", Env({{"HF_HUB_CACHE", root}}));
  EXPECT_TRUE(absl::IsNotFound(path.status()));
  EXPECT_THAT(std::string(path.status().message()),
              AllOf(HasSubstr(repo + "/refs/v2"), HasSubstr(repo + "/snapshots/v2"),
                    HasSubstr("--revision v2")));
  Write(repo + "/refs/gone", "aaaabbbbccccddddeeeeffff0000111122223333");
  path = ResolveModelPath("Qwen/Tiny-0.5B@gone", Env({{"HF_HUB_CACHE", root}}));
  EXPECT_THAT(std::string(path.status().message()),
              HasSubstr(absl::StrCat(repo, "/refs/gone names commit aaaabbbbccccddddeeeeffff"
                                           "0000111122223333, but there is no ",
                                     repo, "/snapshots/aaaabbbbccccddddeeeeffff0000111122223333")));
}

TEST(ModelPathTest, NothingLeavesTheCache) {
  const std::string root = TempDir("escape/hub");
  const std::string repo = MakeCache(root);
  // Not hub ids: the error says so and no cache path is formed.
  for (const char* model : {"/no/such/dir", "a/b/c", "../Tiny-0.5B", "Qwen/Tiny-0.5B@../../x",
                            "Qwen/Tiny-0.5B@", "Qwen--x/y"}) {
    absl::StatusOr<ModelPath> path = ResolveModelPath(model, Env({{"HF_HUB_CACHE", root}}));
    EXPECT_THAT(std::string(path.status().message()), HasSubstr("not a Hugging Face hub id"))
        << model;
  }
  // A ref file must hold a commit hash, not a path.
  Write(repo + "/refs/evil", "../../../etc");
  absl::StatusOr<ModelPath> path =
      ResolveModelPath("Qwen/Tiny-0.5B@evil", Env({{"HF_HUB_CACHE", root}}));
  EXPECT_TRUE(absl::IsInvalidArgument(path.status()));
  EXPECT_THAT(std::string(path.status().message()), HasSubstr("not a commit hash"));
}

}  // namespace
}  // namespace tpserve
