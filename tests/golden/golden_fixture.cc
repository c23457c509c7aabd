#include "tests/golden/golden_fixture.h"

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/loader/npy.h"

namespace tpserve {

std::vector<std::vector<std::vector<int32_t>>> PromptGroups(const GoldenFixture& f,
                                                             bool together) {
  if (together) return {f.prompts};
  std::vector<std::vector<std::vector<int32_t>>> groups;
  for (const auto& p : f.prompts) groups.push_back({p});
  return groups;
}

std::string FixtureRoot() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr) return "tests/data/models";
  return absl::StrCat(srcdir, "/", workspace ? workspace : "tpserve", "/tests/data/models");
}

std::vector<std::string> ListFixtures(const std::string& root) {
  std::vector<std::string> dirs;
  DIR* d = opendir(root.c_str());
  if (d == nullptr) return dirs;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (std::ifstream(root + "/" + name + "/golden.json")) dirs.push_back(root + "/" + name);
  }
  closedir(d);
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

absl::StatusOr<GoldenFixture> LoadFixture(const std::string& dir) {
  std::ifstream in(dir + "/golden.json");
  if (!in) return absl::NotFoundError(dir + "/golden.json: cannot open");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(dir + "/golden.json: not a JSON object");
  }
  GoldenFixture f;
  f.dir = dir;
  try {
    f.name = j.at("name").get<std::string>();
    f.tp_sizes = j.at("tp_sizes").get<std::vector<int>>();
    f.prompts = j.at("prompts").get<std::vector<std::vector<int32_t>>>();
    for (const auto& file : j.at("logits")) {
      TPSERVE_ASSIGN_OR_RETURN(Tensor t, ReadNpy(dir + "/" + file.get<std::string>()));
      f.logits.push_back(std::move(t));
    }
    for (const auto& g : j.value("greedy", nlohmann::json::array())) {
      GreedyCase c;
      c.prompt_index = g.at("prompt_index").get<int>();
      c.output_ids = g.at("output_ids").get<std::vector<int32_t>>();
      c.output_logprobs = g.value("output_logprobs", std::vector<double>{});
      f.greedy.push_back(std::move(c));
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/golden.json: ", e.what()));
  }
  if (f.logits.size() != f.prompts.size()) {
    return absl::InvalidArgumentError(dir + "/golden.json: one logits file per prompt expected");
  }
  return f;
}

}  // namespace tpserve
