#include "server/testing/fake_step_executor.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace tpserve {
namespace {

using worker::v1::StepPlan;
using worker::v1::StepResult;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

absl::Status Broken(uint64_t step, const std::string& what) {
  return absl::InternalError(absl::StrCat("plan ", step, ": ", what));
}

}  // namespace

FakeStepExecutor::FakeStepExecutor(FakeExecutorConfig config) : config_(std::move(config)) {}

int32_t FakeStepExecutor::HashNextToken(absl::Span<const int32_t> history, int vocab_size) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the ids
  for (int32_t id : history) {
    h ^= static_cast<uint32_t>(id);
    h *= 1099511628211ull;
  }
  return static_cast<int32_t>(h % static_cast<uint64_t>(vocab_size));
}

std::function<int32_t(absl::Span<const int32_t>)> FakeStepExecutor::ScriptedAnswer(
    std::vector<int32_t> script, int32_t end) {
  return [script, end](absl::Span<const int32_t> history) {
    for (size_t k = script.size(); k > 0; --k) {
      if (history.size() >= k &&
          std::equal(script.begin(), script.begin() + k, history.end() - k)) {
        return k == script.size() ? end : script[k];
      }
    }
    return script.empty() ? end : script[0];
  };
}

std::vector<int32_t> FakeStepExecutor::HashContinuation(std::vector<int32_t> prompt, int n,
                                                        int vocab_size) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(HashNextToken(prompt, vocab_size));
    prompt.push_back(out.back());
  }
  return out;
}

absl::StatusOr<StepResult> FakeStepExecutor::RunStep(const StepPlan& plan) {
  int64_t tokens = 0;
  for (const auto& added : plan.new_sequences()) tokens += added.num_new_tokens();
  for (const auto& delta : plan.running()) tokens += delta.num_new_tokens();
  absl::Duration delay = config_.step_delay + config_.token_delay * tokens;
  if (plan.step() == 1) delay += config_.first_step_delay;
  if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
  absl::MutexLock lock(&mu_);
  step_tokens_.push_back(tokens);
  if (failed_ || (config_.fail_at_step != 0 && plan.step() >= config_.fail_at_step)) {
    failed_ = true;
    return absl::UnavailableError(absl::StrCat("fake rank failed at step ", plan.step()));
  }
  if (absl::Status status = Apply(plan); !status.ok()) {
    errors_.push_back(status.ToString());
    failed_ = true;
    return status;
  }
  StepResult result;
  result.set_step(plan.step());
  result.set_compute_time_us(7);
  for (const auto& added : plan.new_sequences()) {
    *result.add_sequences() = Compute(added.seq_id(), added.num_new_tokens(), seqs_[added.seq_id()]);
  }
  for (const auto& delta : plan.running()) {
    *result.add_sequences() = Compute(delta.seq_id(), delta.num_new_tokens(), seqs_[delta.seq_id()]);
  }
  if (config_.corrupt) config_.corrupt(&result);
  return result;
}

absl::Status FakeStepExecutor::Apply(const StepPlan& plan) {
  if (plan.step() != last_step_ + 1) {
    return Broken(plan.step(), absl::StrCat("expected step ", last_step_ + 1));
  }
  last_step_ = plan.step();
  for (uint64_t id : plan.drop_seq_ids()) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) return Broken(plan.step(), absl::StrCat("drop of unknown ", id));
    for (int32_t block : it->second.blocks) {
      if (--block_holders_[block] == 0) block_holders_.erase(block);
    }
    seqs_.erase(it);
  }
  absl::flat_hash_set<uint64_t> in_batch;
  int64_t tokens = 0;
  for (const auto& added : plan.new_sequences()) {
    if (!in_batch.insert(added.seq_id()).second) return Broken(plan.step(), "duplicate id");
    if (absl::Status s = AddNew(added); !s.ok()) return Broken(plan.step(), s.ToString());
    tokens += added.num_new_tokens();
  }
  for (const auto& delta : plan.running()) {
    if (!in_batch.insert(delta.seq_id()).second) return Broken(plan.step(), "duplicate id");
    if (absl::Status s = ApplyDelta(delta); !s.ok()) return Broken(plan.step(), s.ToString());
    tokens += delta.num_new_tokens();
  }
  if (in_batch.empty()) return Broken(plan.step(), "empty batch");
  if (tokens > config_.limits.max_batch_tokens()) {
    return Broken(plan.step(), absl::StrCat(tokens, " tokens over the batch limit"));
  }
  if (static_cast<int>(in_batch.size()) > config_.limits.max_sequences()) {
    return Broken(plan.step(), absl::StrCat(in_batch.size(), " sequences over the limit"));
  }
  return absl::OkStatus();
}

absl::Status FakeStepExecutor::AddNew(const worker::v1::NewSequence& added) {
  const uint64_t id = added.seq_id();
  if (seqs_.contains(id)) return absl::InternalError(absl::StrCat("new ", id, " is live"));
  Seq seq;
  seq.tokens.assign(added.token_ids().begin(), added.token_ids().end());
  seq.num_prompt = added.num_prompt_tokens() == 0 ? static_cast<int64_t>(seq.tokens.size())
                                                  : added.num_prompt_tokens();
  seq.sampling = added.sampling();
  const int64_t len = static_cast<int64_t>(seq.tokens.size());
  if (seq.tokens.empty() || added.num_cached_tokens() < 0 || added.num_new_tokens() < 1 ||
      added.num_cached_tokens() + added.num_new_tokens() > len || seq.num_prompt > len) {
    return absl::InternalError(absl::StrCat("new ", id, ": bad token counts"));
  }
  if (added.num_cached_tokens() > 0 && seq.sampling.prompt_logprobs() >= 0) {
    return absl::InternalError(
        absl::StrCat("new ", id, ": asks for prompt logprobs of cached positions"));
  }
  seq.computed = added.num_cached_tokens();
  ExtendKeys(seq);
  if (seq.num_prompt < len) ++recomputes_;
  if (seq.computed + added.num_new_tokens() < len) ++partial_prefills_;
  cached_positions_ += seq.computed;
  const std::vector<int32_t> table(added.block_table().begin(), added.block_table().end());
  TPSERVE_RETURN_IF_ERROR(TakeBlocks(id, table, seq));
  absl::Status s = CheckCoverage(id, seq, added.num_new_tokens());
  if (s.ok()) s = CheckKv(id, seq, added.num_new_tokens());
  if (!s.ok()) {
    for (int32_t block : seq.blocks) {
      if (--block_holders_[block] == 0) block_holders_.erase(block);
    }
    return s;
  }
  seqs_.emplace(id, std::move(seq));
  return absl::OkStatus();
}

absl::Status FakeStepExecutor::ApplyDelta(const worker::v1::SequenceDelta& delta) {
  const uint64_t id = delta.seq_id();
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return absl::InternalError(absl::StrCat("delta for unknown ", id));
  Seq& seq = it->second;
  std::vector<int32_t> expected;
  if (seq.sampled.has_value()) expected.push_back(*seq.sampled);
  const std::vector<int32_t> got(delta.new_token_ids().begin(), delta.new_token_ids().end());
  if (got != expected) {
    return absl::InternalError(absl::StrCat("delta for ", id, " carries [",
                                            absl::StrJoin(got, ","), "], sampled [",
                                            absl::StrJoin(expected, ","), "]"));
  }
  seq.sampled.reset();
  seq.tokens.insert(seq.tokens.end(), got.begin(), got.end());
  ExtendKeys(seq);
  const int64_t num_new = delta.num_new_tokens();
  if (num_new < 1 || seq.computed + num_new > static_cast<int64_t>(seq.tokens.size())) {
    return absl::InternalError(absl::StrCat("delta for ", id, ": bad num_new_tokens ", num_new));
  }
  if (seq.computed + num_new < static_cast<int64_t>(seq.tokens.size())) ++partial_prefills_;
  const std::vector<int32_t> blocks(delta.new_block_ids().begin(), delta.new_block_ids().end());
  TPSERVE_RETURN_IF_ERROR(TakeBlocks(id, blocks, seq));
  TPSERVE_RETURN_IF_ERROR(CheckCoverage(id, seq, num_new));
  return CheckKv(id, seq, num_new);
}

absl::Status FakeStepExecutor::TakeBlocks(uint64_t id, absl::Span<const int32_t> blocks,
                                          Seq& seq) {
  for (int32_t block : blocks) {
    if (block < 0 || block >= config_.num_blocks) {
      return absl::InternalError(absl::StrCat("seq ", id, ": block ", block, " out of range"));
    }
    if (std::find(seq.blocks.begin(), seq.blocks.end(), block) != seq.blocks.end()) {
      return absl::InternalError(absl::StrCat("seq ", id, ": block ", block, " listed twice"));
    }
    ++block_holders_[block];
    seq.blocks.push_back(block);
  }
  return absl::OkStatus();
}

absl::Status FakeStepExecutor::CheckCoverage(uint64_t id, const Seq& seq, int64_t num_new) const {
  const int64_t context = seq.computed + num_new;
  if (static_cast<int64_t>(seq.blocks.size()) != CeilDiv(context, config_.block_size)) {
    return absl::InternalError(absl::StrCat("seq ", id, ": ", seq.blocks.size(),
                                            " blocks for a context of ", context));
  }
  return absl::OkStatus();
}

void FakeStepExecutor::ExtendKeys(Seq& seq) const {
  uint64_t h = seq.keys.empty() ? 1469598103934665603ull : seq.keys.back();
  for (size_t p = seq.keys.size(); p < seq.tokens.size(); ++p) {
    h ^= static_cast<uint32_t>(seq.tokens[p]) + 1;  // FNV-1a; never 0 in practice
    h *= 1099511628211ull;
    seq.keys.push_back(h);
  }
}

absl::Status FakeStepExecutor::CheckKv(uint64_t id, const Seq& seq, int64_t num_new) const {
  const int64_t bs = config_.block_size;
  for (int64_t p = 0; p < seq.computed; ++p) {
    const int32_t block = seq.blocks[p / bs];
    auto it = kv_.find(block);
    if (it == kv_.end() || it->second[p % bs] != seq.keys[p]) {
      return absl::InternalError(absl::StrCat("seq ", id, ": position ", p, " (block ", block,
                                              ") does not hold the KV of its own prefix"));
    }
  }
  for (int64_t p = seq.computed; p < seq.computed + num_new; ++p) {
    const int32_t block = seq.blocks[p / bs];
    if (block_holders_.at(block) > 1) {
      return absl::InternalError(absl::StrCat("seq ", id, ": position ", p, " writes into block ",
                                              block, ", which ", block_holders_.at(block),
                                              " live sequences hold"));
    }
  }
  return absl::OkStatus();
}

worker::v1::SequenceOutput FakeStepExecutor::Compute(uint64_t id, int64_t num_new, Seq& seq) {
  worker::v1::SequenceOutput output;
  output.set_seq_id(id);
  if (seq.sampling.prompt_logprobs() >= 0) {
    for (int64_t p = seq.computed; p < seq.computed + num_new && p + 1 < seq.num_prompt; ++p) {
      worker::v1::PositionLogprobs* lp = output.add_prompt_logprobs();
      lp->mutable_chosen()->set_token_id(seq.tokens[p + 1]);
      lp->mutable_chosen()->set_logprob(-0.01f * static_cast<float>(p + 1));
    }
  }
  const int64_t bs = config_.block_size;
  for (int64_t p = seq.computed; p < seq.computed + num_new; ++p) {
    std::vector<uint64_t>& slots = kv_[seq.blocks[p / bs]];
    slots.resize(bs, 0);
    slots[p % bs] = seq.keys[p];
  }
  computed_positions_ += num_new;
  seq.computed += num_new;
  if (seq.computed < static_cast<int64_t>(seq.tokens.size())) return output;
  const int32_t token = config_.next_token ? config_.next_token(seq.tokens)
                                           : HashNextToken(seq.tokens, config_.vocab_size);
  seq.sampled = token;
  output.set_token_id(token);
  if (seq.sampling.logprobs() >= 0) {
    output.mutable_logprobs()->mutable_chosen()->set_token_id(token);
    output.mutable_logprobs()->mutable_chosen()->set_logprob(-0.5f);
    for (int i = 0; i < seq.sampling.logprobs(); ++i) {
      worker::v1::Logprob* top = output.mutable_logprobs()->add_top();
      top->set_token_id((token + i) % config_.vocab_size);
      top->set_logprob(-0.5f - static_cast<float>(i));
    }
  }
  return output;
}

std::vector<std::string> FakeStepExecutor::errors() const {
  absl::MutexLock lock(&mu_);
  return errors_;
}

int FakeStepExecutor::num_live_sequences() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(seqs_.size());
}

bool FakeStepExecutor::holds(uint64_t seq_id) const {
  absl::MutexLock lock(&mu_);
  return seqs_.contains(seq_id);
}

int FakeStepExecutor::num_recomputes() const {
  absl::MutexLock lock(&mu_);
  return recomputes_;
}

int64_t FakeStepExecutor::num_computed_positions() const {
  absl::MutexLock lock(&mu_);
  return computed_positions_;
}

int64_t FakeStepExecutor::num_cached_positions() const {
  absl::MutexLock lock(&mu_);
  return cached_positions_;
}

std::vector<int64_t> FakeStepExecutor::step_tokens() const {
  absl::MutexLock lock(&mu_);
  return step_tokens_;
}

int FakeStepExecutor::num_partial_prefills() const {
  absl::MutexLock lock(&mu_);
  return partial_prefills_;
}

}  // namespace tpserve
