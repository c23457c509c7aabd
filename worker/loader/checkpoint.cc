#include "worker/loader/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/json_fields.h"
#include "base/json_file.h"
#include "base/status_macros.h"

namespace tpserve {
namespace {

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Shard names are relative paths inside the checkpoint directory.
bool IsSafeShardName(const std::string& name) {
  if (name.empty() || name[0] == '/') return false;
  for (absl::string_view part : absl::StrSplit(name, '/')) {
    if (part == "..") return false;
  }
  return true;
}

// weight_map from the index: tensor name -> shard file name.
absl::StatusOr<std::map<std::string, std::string>> ParseIndex(const std::string& index_path) {
  TPSERVE_ASSIGN_OR_RETURN(std::string text, ReadTextFile(index_path, kMaxJsonFileBytes));
  // A duplicated weight_map key would name one tensor in two shards; nlohmann would
  // silently keep one, so duplicates are rejected at parse time.
  TPSERVE_ASSIGN_OR_RETURN(nlohmann::json root,
                           ParseJsonObject(text, index_path, /*reject_duplicate_keys=*/true));
  auto it = root.find("weight_map");
  if (it == root.end()) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": missing \"weight_map\""));
  }
  if (!it->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        index_path, ": \"weight_map\" must be an object, got ", JsonTypeName(*it)));
  }
  std::map<std::string, std::string> weight_map;
  for (const auto& [tensor, file] : it->items()) {
    if (!file.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": weight_map entry for tensor \"", tensor,
                       "\" must be a file name string, got ", JsonTypeName(file)));
    }
    const std::string name = file.get<std::string>();
    if (!IsSafeShardName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": tensor \"", tensor, "\" maps to \"", name,
                       "\", which is not a relative path inside the checkpoint directory"));
    }
    weight_map[tensor] = name;
  }
  return weight_map;
}

}  // namespace

struct Checkpoint::Impl {
  std::string dir;
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  // Every tensor of every file; views point into `files`.
  absl::flat_hash_map<std::string, const TensorView*> tensors;

  // Adds the tensors of `file`; a name already held by another file is an error.
  absl::Status Add(std::unique_ptr<SafetensorsFile> file) {
    for (const TensorView& view : file->tensors()) {
      auto [it, inserted] = tensors.emplace(view.name, &view);
      if (!inserted) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, ": tensor \"", view.name, "\" is in two shards: ", it->second->file,
                         " and ", view.file));
      }
    }
    files.push_back(std::move(file));
    return absl::OkStatus();
  }

  absl::Status OpenSharded(const std::string& index_path) {
    TPSERVE_ASSIGN_OR_RETURN(auto weight_map, ParseIndex(index_path));  // tensor -> shard
    std::map<std::string, std::string> first_tensor;  // shard -> a tensor naming it
    for (const auto& [tensor, shard] : weight_map) first_tensor.emplace(shard, tensor);
    for (const auto& [shard, tensor] : first_tensor) {
      const std::string path = absl::StrCat(dir, "/", shard);
      if (!FileExists(path)) {
        return absl::NotFoundError(absl::StrCat(index_path, ": shard ", shard, " (named for tensor \"",
                                                tensor, "\") does not exist: ", path));
      }
      TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(path));
      TPSERVE_RETURN_IF_ERROR(Add(std::move(file)));
    }
    for (const auto& [tensor, shard] : weight_map) {
      auto it = tensors.find(tensor);
      const std::string path = absl::StrCat(dir, "/", shard);
      if (it == tensors.end() || it->second->file != path) {
        return absl::InvalidArgumentError(absl::StrCat(
            index_path, ": weight_map puts tensor \"", tensor, "\" in ", shard,
            ", but that file does not hold it",
            it == tensors.end() ? "" : absl::StrCat(" (", it->second->file, " does)")));
      }
    }
    if (tensors.size() != weight_map.size()) {
      for (const auto& [name, view] : tensors) {
        if (weight_map.count(name) == 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              index_path, ": tensor \"", name, "\" in ", view->file, " is not in weight_map"));
        }
      }
    }
    return absl::OkStatus();
  }
};

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  auto checkpoint = std::unique_ptr<Checkpoint>(new Checkpoint);
  checkpoint->impl_ = std::make_unique<Impl>();
  Impl& impl = *checkpoint->impl_;
  impl.dir = dir;
  const std::string single = absl::StrCat(dir, "/", kSingleFile);
  const std::string index = absl::StrCat(dir, "/", kIndexFile);
  // transformers prefers the single file when both are present; so do we.
  if (FileExists(single)) {
    TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(single));
    TPSERVE_RETURN_IF_ERROR(impl.Add(std::move(file)));
  } else if (FileExists(index)) {
    TPSERVE_RETURN_IF_ERROR(impl.OpenSharded(index));
  } else {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no checkpoint: neither ", kSingleFile, " nor ", kIndexFile));
  }
  return checkpoint;
}

Checkpoint::~Checkpoint() = default;

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(impl_->tensors.size());
  for (const auto& [name, view] : impl_->tensors) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

bool Checkpoint::Contains(absl::string_view name) const {
  return impl_->tensors.contains(name);
}

absl::StatusOr<TensorView> Checkpoint::Get(absl::string_view name) const {
  auto it = impl_->tensors.find(name);
  if (it == impl_->tensors.end()) {
    return absl::NotFoundError(
        absl::StrCat("tensor \"", name, "\" is not in the checkpoint at ", impl_->dir));
  }
  return *it->second;
}

absl::StatusOr<Tensor> Checkpoint::GetFloat(absl::string_view name,
                                            const Shape& expected_shape) const {
  TPSERVE_ASSIGN_OR_RETURN(TensorView view, Get(name));
  return TensorViewToFloat(view, expected_shape);
}

absl::Status Checkpoint::GetFloatInto(absl::string_view name, const Shape& expected_shape,
                                      Tensor* out) const {
  TPSERVE_ASSIGN_OR_RETURN(TensorView view, Get(name));
  return TensorViewToFloatInto(view, expected_shape, out);
}

}  // namespace tpserve
