#include "server/model_path.h"

#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/regular_file.h"

namespace tpserve {
namespace {

// A ref file holds a 40-character commit hash; anything near this size is not one.
constexpr uint64_t kMaxRefFileBytes = 1024;

bool IsDirectory(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_directory(path, error);
}

// One part of a hub id or revision: 1-96 of [A-Za-z0-9._-], not "." or "..", so that it
// stays one path component inside the cache.
bool IsHubPart(absl::string_view part) {
  if (part.empty() || part.size() > 96 || part == "." || part == "..") return false;
  for (char c : part) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

struct HubId {
  std::string repo;      // "org/name" or "name"
  std::string revision;  // "main" unless given after '@'
};

// nullopt when `model` is not of the form org/name[@revision] or name[@revision].
std::optional<HubId> ParseHubId(const std::string& model) {
  const std::vector<std::string> halves = absl::StrSplit(model, absl::MaxSplits('@', 1));
  HubId id{halves[0], halves.size() == 2 ? halves[1] : "main"};
  const std::vector<absl::string_view> repo = absl::StrSplit(id.repo, '/');
  if (repo.size() > 2) return std::nullopt;
  for (absl::string_view part : repo) {
    if (!IsHubPart(part) || absl::StrContains(part, "--")) return std::nullopt;
  }
  for (absl::string_view part : absl::StrSplit(id.revision, '/')) {  // refs/pr/1 has slashes
    if (!IsHubPart(part)) return std::nullopt;
  }
  return id;
}

struct CacheRoot {
  std::string path;
  std::string chosen_by;  // for the error: which variable chose it, and which were unset
};

// huggingface_hub's order (constants.py); an empty variable counts as unset.
std::optional<CacheRoot> HubCacheRoot(const EnvLookup& env) {
  const struct {
    const char* name;
    const char* suffix;
  } candidates[] = {{"HF_HUB_CACHE", ""},
                    {"HF_HOME", "/hub"},
                    {"XDG_CACHE_HOME", "/huggingface/hub"},
                    {"HOME", "/.cache/huggingface/hub"}};
  std::vector<std::string> unset;
  for (const auto& [name, suffix] : candidates) {
    const std::optional<std::string> value = env(name);
    if (value.has_value() && !value->empty()) {
      std::string chosen_by = absl::StrCat("$", name, suffix);
      if (!unset.empty()) absl::StrAppend(&chosen_by, "; ", absl::StrJoin(unset, ", "), " unset");
      return CacheRoot{absl::StrCat(*value, suffix), chosen_by};
    }
    unset.push_back(name);
  }
  return std::nullopt;
}

// The snapshot directory `revision` names in `repo_dir`, or what was missing.
absl::StatusOr<std::string> FindSnapshot(const std::string& repo_dir, const std::string& revision) {
  if (!IsDirectory(repo_dir)) return absl::NotFoundError(absl::StrCat("no directory ", repo_dir));
  const std::string ref = absl::StrCat(repo_dir, "/refs/", revision);
  absl::StatusOr<std::string> commit = ReadRegularFile(ref, kMaxRefFileBytes);
  if (commit.ok()) {
    const std::string hash(absl::StripAsciiWhitespace(*commit));
    if (!IsHubPart(hash)) {
      return absl::InvalidArgumentError(
          absl::StrCat(ref, " holds \"", absl::CHexEscape(hash), "\", not a commit hash"));
    }
    const std::string snapshot = absl::StrCat(repo_dir, "/snapshots/", hash);
    if (IsDirectory(snapshot)) return snapshot;
    return absl::NotFoundError(
        absl::StrCat(ref, " names commit ", hash, ", but there is no ", snapshot));
  }
  if (!absl::IsNotFound(commit.status())) return commit.status();
  const std::string snapshot = absl::StrCat(repo_dir, "/snapshots/", revision);
  if (IsDirectory(snapshot)) return snapshot;
  return absl::NotFoundError(
      absl::StrCat("neither the ref ", ref, " nor the snapshot ", snapshot, " exists"));
}

}  // namespace

absl::StatusOr<ModelPath> ResolveModelPath(const std::string& model, const EnvLookup& env) {
  if (IsDirectory(model)) return ModelPath{model, ""};
  std::error_code error;
  const char* literal =
      std::filesystem::exists(model, error) ? "not a directory: " : "no directory ";
  const std::string looked = absl::StrCat("--model ", model, " not found: ", literal, model);
  const std::optional<HubId> id = ParseHubId(model);
  if (!id.has_value()) {
    return absl::NotFoundError(
        absl::StrCat(looked, ", and not a Hugging Face hub id (org/name[@revision])"));
  }
  const std::optional<CacheRoot> root = HubCacheRoot(env);
  if (!root.has_value()) {
    return absl::NotFoundError(
        absl::StrCat(looked,
                     "; no Hugging Face hub cache to look in (HF_HUB_CACHE, HF_HOME, "
                     "XDG_CACHE_HOME and HOME are all unset)"));
  }
  const std::string repo_dir =
      absl::StrCat(root->path, "/models--", absl::StrReplaceAll(id->repo, {{"/", "--"}}));
  absl::StatusOr<std::string> snapshot = FindSnapshot(repo_dir, id->revision);
  if (!snapshot.ok()) {
    return absl::Status(
        snapshot.status().code(),
        absl::StrCat(looked, "; in the Hugging Face hub cache ", root->path, " (chosen by ",
                     root->chosen_by, "): ", snapshot.status().message(),
                     ". tpserve never downloads: fetch it first, e.g. huggingface-cli download ",
                     id->repo, id->revision == "main" ? "" : " --revision " + id->revision));
  }
  return ModelPath{*std::move(snapshot), id->repo};
}

}  // namespace tpserve
