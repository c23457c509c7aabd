#include "client/bench_dataset.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/json_file.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

// The largest public ShareGPT files are under 1 GB.
constexpr uint64_t kMaxShareGptBytes = uint64_t{2} << 30;
constexpr int kMinLen = 4;  // vLLM's is_valid_sequence

absl::Status Bad(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("--dataset-path ", path, ": ", why));
}

}  // namespace

absl::StatusOr<std::vector<Conversation>> ReadShareGpt(const std::string& path) {
  TPSERVE_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(path, kMaxShareGptBytes));
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Bad(path, "not valid JSON");
  if (!doc.is_array()) {
    return Bad(path, "a ShareGPT dataset is a JSON list of {\"conversations\": [...]}");
  }
  std::vector<Conversation> out;
  for (size_t i = 0; i < doc.size(); ++i) {
    const nlohmann::json& entry = doc[i];
    const std::string where = absl::StrCat("entry ", i);
    if (!entry.is_object()) return Bad(path, where + " is not an object");
    auto turns = entry.find("conversations");
    if (turns == entry.end() || !turns->is_array()) {
      return Bad(path, where + " has no \"conversations\" list");
    }
    for (size_t t = 0; t < turns->size(); ++t) {
      const nlohmann::json& turn = (*turns)[t];
      auto value = turn.is_object() ? turn.find("value") : turn.end();
      if (!turn.is_object() || value == turn.end() || !value->is_string()) {
        return Bad(path, absl::StrCat(where, ": conversations[", t,
                                      "] must be an object with a string \"value\""));
      }
    }
    if (turns->size() < 2) continue;
    out.push_back({(*turns)[0]["value"].get<std::string>(), (*turns)[1]["value"].get<std::string>()});
  }
  if (out.empty()) return Bad(path, "no conversation has two turns");
  return out;
}

absl::StatusOr<std::vector<BenchPrompt>> ShareGptPrompts(
    const std::vector<Conversation>& conversations, const ShareGptOptions& o,
    const TokenizeFn& tokenize, const std::string& path) {
  std::vector<size_t> order(conversations.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 random(o.seed);
  std::shuffle(order.begin(), order.end(), random);
  std::vector<BenchPrompt> out;
  for (size_t i : order) {
    if (static_cast<int>(out.size()) == o.num_prompts) break;
    TPSERVE_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenize(conversations[i].prompt, true));
    int output_len = o.output_len;
    if (output_len == 0) {
      TPSERVE_ASSIGN_OR_RETURN(const std::vector<int32_t> reply,
                               tokenize(conversations[i].reply, false));
      output_len = static_cast<int>(reply.size());
      if (output_len < kMinLen) continue;
    }
    const int64_t prompt_len = static_cast<int64_t>(ids.size());
    if (prompt_len < kMinLen || prompt_len > o.max_prompt_len ||
        prompt_len + output_len > o.max_total_len) {
      continue;
    }
    out.push_back({std::move(ids), output_len});
  }
  if (out.empty()) {
    return Bad(path, absl::StrCat("no conversation has a prompt of ", kMinLen, " to ",
                                  o.max_prompt_len, " tokens and a reply",
                                  o.output_len == 0 ? absl::StrCat(" of at least ", kMinLen) : "",
                                  " within ", o.max_total_len, " tokens in all"));
  }
  // Oversampling, as vLLM's: passing requests drawn again at random.
  std::uniform_int_distribution<size_t> pick(0, out.size() - 1);
  while (static_cast<int>(out.size()) < o.num_prompts) {
    BenchPrompt again = out[pick(random)];
    out.push_back(std::move(again));
  }
  return out;
}

}  // namespace tpserve
