// Test helpers for engine tests: a per-request collector of chunks and the final
// status, and a started engine over a FakeStepExecutor.
#ifndef TPSERVE_SERVER_TESTING_ENGINE_TEST_UTIL_H_
#define TPSERVE_SERVER_TESTING_ENGINE_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/engine.h"
#include "server/testing/fake_step_executor.h"

namespace tpserve {

// Collects what the engine streams for one request. Callbacks run on the engine
// thread; read the fields after WaitDone().
class Collector {
 public:
  Engine::ChunkCallback OnChunk() {
    return [this](EngineChunk chunk) {
      absl::MutexLock lock(&mu_);
      chunks_.push_back(std::move(chunk));
    };
  }
  Engine::DoneCallback OnDone() {
    return [this](absl::Status status) {
      {
        absl::MutexLock lock(&mu_);
        status_ = std::move(status);
        ++done_calls_;
      }
      done_.Notify();
    };
  }
  bool WaitDone(absl::Duration timeout = absl::Seconds(30)) {
    return done_.WaitForNotificationWithTimeout(timeout);
  }

  absl::Status status() const {
    absl::MutexLock lock(&mu_);
    return status_;
  }
  int done_calls() const {
    absl::MutexLock lock(&mu_);
    return done_calls_;
  }
  std::vector<EngineChunk> chunks() const {
    absl::MutexLock lock(&mu_);
    return chunks_;
  }
  std::vector<int32_t> Tokens() const {
    std::vector<int32_t> tokens;
    for (const EngineChunk& chunk : chunks()) {
      tokens.insert(tokens.end(), chunk.token_ids.begin(), chunk.token_ids.end());
    }
    return tokens;
  }
  std::string Text() const {
    std::string text;
    for (const EngineChunk& chunk : chunks()) text += chunk.text;
    return text;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<EngineChunk> chunks_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  int done_calls_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Notification done_;
};

inline EngineRequest Request(int prompt_len, int max_tokens, int salt) {
  EngineRequest request;
  for (int i = 0; i < prompt_len; ++i) request.prompt_ids.push_back((i * 37 + salt * 11) % 1000);
  request.max_tokens = max_tokens;
  return request;
}

// A started engine over a fake with matching limits; the engine goes first.
struct TestEngine {
  // `start` false: the test calls engine->Start() itself, e.g. after submitting a batch
  // that must all be in the first step.
  TestEngine(FakeExecutorConfig fake_config, EngineOptions options,
             const Tokenizer* tokenizer = nullptr, bool start = true)
      : fake((fake_config.limits = options.limits, fake_config)) {
    auto created = Engine::Create(options, &fake, tokenizer);
    EXPECT_TRUE(created.ok()) << created.status();
    engine = *std::move(created);
    if (start) engine->Start();
  }

  // Submits every request at once; their results arrive in the collectors.
  std::vector<std::unique_ptr<Collector>> SubmitAll(const std::vector<EngineRequest>& requests) {
    std::vector<std::unique_ptr<Collector>> out;
    for (const EngineRequest& request : requests) {
      out.push_back(std::make_unique<Collector>());
      auto id = engine->Submit(request, out.back()->OnChunk(), out.back()->OnDone());
      EXPECT_TRUE(id.ok()) << id.status();
    }
    return out;
  }

  // Submits every request at once and waits for all of them.
  std::vector<std::unique_ptr<Collector>> RunAll(const std::vector<EngineRequest>& requests) {
    std::vector<std::unique_ptr<Collector>> out = SubmitAll(requests);
    for (auto& collector : out) EXPECT_TRUE(collector->WaitDone());
    return out;
  }

  FakeStepExecutor fake;
  std::unique_ptr<Engine> engine;
};

inline EngineOptions Options(int max_batch_tokens, int max_sequences) {
  EngineOptions options;
  options.limits = MakeBatchLimits(0, max_batch_tokens, max_sequences);
  return options;
}

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TESTING_ENGINE_TEST_UTIL_H_
