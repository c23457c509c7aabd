#include "client/bench.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "client/output.h"
#include "grpcpp/grpcpp.h"

namespace tpserve {
namespace {

// Caps the requests in flight.
class Slots {
 public:
  explicit Slots(int limit) : free_(limit) {}
  void Acquire() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &Slots::Available));
    --free_;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    ++free_;
  }

 private:
  bool Available() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return free_ > 0; }
  absl::Mutex mu_;
  int free_ ABSL_GUARDED_BY(mu_);
};

double Since(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

RequestTiming TimeOne(v1::Inference::Stub& stub, const v1::GenerateRequest& request,
                      absl::Duration timeout) {
  RequestTiming t;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  RequestClock clock;
  auto reader = stub.Generate(&context, request);
  v1::GenerateResponse chunk;
  while (reader->Read(&chunk)) {
    if (chunk.has_usage()) t.cached_prompt_tokens = chunk.usage().cached_prompt_tokens();
    clock.Chunk(chunk.token_ids_size(), &t);
  }
  const grpc::Status status = reader->Finish();
  clock.Finish(&t);
  t.ok = status.ok();
  if (!t.ok) t.error_code = StatusCodeName(status.error_code());
  return t;
}

v1::GenerateRequest BenchRequest(const BenchPrompt& prompt, const BenchOptions& o) {
  v1::GenerateRequest request;
  request.mutable_token_ids()->mutable_ids()->Add(prompt.ids.begin(), prompt.ids.end());
  v1::SamplingParams* s = request.mutable_sampling();
  s->set_max_tokens(prompt.output_len);
  s->set_ignore_eos(true);
  s->set_temperature(o.temperature);
  s->set_seed(o.seed);
  return request;
}

}  // namespace

void RequestClock::Chunk(int tokens, RequestTiming* t) {
  if (tokens == 0) return;
  const double now = Since(start_);
  if (t->output_tokens == 0) {
    t->ttft_s = now;
  } else {
    t->itl_s.push_back(now - last_s_);
  }
  last_s_ = now;
  t->output_tokens += tokens;
}

void RequestClock::Finish(RequestTiming* t) const { t->e2e_s = Since(start_); }

RequestTimer GrpcTimer(v1::Inference::Stub& stub, const BenchOptions& options) {
  return [&stub, options](const BenchPrompt& prompt) {
    return TimeOne(stub, BenchRequest(prompt, options), options.stream_timeout);
  };
}

std::vector<std::vector<int32_t>> RandomPrompts(int count, int length, int vocab_size,
                                                uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int32_t> id(0, vocab_size - 1);
  std::vector<std::vector<int32_t>> prompts(count, std::vector<int32_t>(length));
  for (auto& prompt : prompts) {
    for (int32_t& token : prompt) token = id(random);
  }
  return prompts;
}

namespace {

// The prefix every prompt of a run shares: random ids from a stream of its own, so the
// prompts' own ids do not depend on prefix_len.
std::vector<int32_t> SharedPrefix(int prefix_len, int vocab_size, uint64_t seed) {
  return RandomPrompts(1, prefix_len, vocab_size, seed ^ 0x5851f42d4c957f2dULL)[0];
}

}  // namespace

std::vector<std::vector<int32_t>> SharedPrefixPrompts(int count, int prefix_len, int length,
                                                      int vocab_size, uint64_t seed) {
  const std::vector<int32_t> prefix = SharedPrefix(prefix_len, vocab_size, seed);
  std::vector<std::vector<int32_t>> prompts = RandomPrompts(count, length, vocab_size, seed);
  for (auto& prompt : prompts) prompt.insert(prompt.begin(), prefix.begin(), prefix.end());
  return prompts;
}

LengthRange RangeAround(int length, double ratio) {
  LengthRange r;
  r.low = std::max(1, static_cast<int>(std::floor(length * (1 - ratio))));
  r.high = std::max(r.low, static_cast<int>(std::ceil(length * (1 + ratio))));
  return r;
}

std::vector<BenchPrompt> RandomDataset(const BenchOptions& o, int count, int vocab_size,
                                       uint64_t seed) {
  // Lengths come from a stream of their own, ids from `seed` prompt after prompt, as
  // RandomPrompts draws them: with ratio 0 these are SharedPrefixPrompts' ids.
  std::vector<BenchPrompt> out(count);
  const LengthRange in = RangeAround(o.input_len, o.random_range_ratio);
  const LengthRange gen = RangeAround(o.output_len, o.random_range_ratio);
  std::mt19937_64 lengths(seed ^ 0x2545f4914f6cdd1dULL);
  std::uniform_int_distribution<int> in_len(in.low, in.high), out_len(gen.low, gen.high);
  const std::vector<int32_t> prefix = SharedPrefix(o.prefix_len, vocab_size, seed);
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int32_t> id(0, vocab_size - 1);
  for (BenchPrompt& p : out) {
    p.ids = prefix;
    p.ids.resize(prefix.size() + in_len(lengths));
    for (size_t i = prefix.size(); i < p.ids.size(); ++i) p.ids[i] = id(random);
    p.output_len = out_len(lengths);
  }
  return out;
}

std::vector<double> ArrivalOffsets(int count, double rate, uint64_t seed, double burstiness) {
  std::vector<double> offsets(count, 0.0);
  if (rate <= 0) return offsets;
  std::mt19937_64 random(seed ^ 0x9e3779b97f4a7c15ULL);
  std::exponential_distribution<double> poisson(rate);
  std::gamma_distribution<double> gamma(burstiness, 1.0 / (rate * burstiness));  // mean 1/rate
  double t = 0;
  for (double& offset : offsets) {
    offset = t;
    t += burstiness == 1 ? poisson(random) : gamma(random);
  }
  return offsets;
}

absl::StatusOr<BenchReport> RunBench(const BenchOptions& o,
                                     const std::vector<BenchPrompt>& prompts,
                                     const std::vector<BenchPrompt>& warmups,
                                     const RequestTimer& timer, const BenchHooks& hooks) {
  const int count = static_cast<int>(prompts.size());
  const auto offsets = ArrivalOffsets(count, o.request_rate, o.seed, o.burstiness);
  for (const BenchPrompt& prompt : warmups) timer(prompt);
  if (hooks.before_run) TPSERVE_RETURN_IF_ERROR(hooks.before_run());
  std::vector<RequestTiming> timings(count);
  Slots slots(o.concurrency > 0 ? o.concurrency : std::max(count, 1));
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int i = 0; i < count; ++i) {
    absl::SleepFor(start + absl::Seconds(offsets[i]) - absl::Now());
    slots.Acquire();
    threads.emplace_back([&, i] {
      timings[i] = timer(prompts[i]);
      timings[i].prompt_tokens = static_cast<int>(prompts[i].ids.size());
      slots.Release();
      const int ended = ++done;
      if (hooks.on_done) hooks.on_done(ended);
    });
  }
  for (std::thread& t : threads) t.join();
  return MakeReport(timings, Since(start), o.report);
}

}  // namespace tpserve
