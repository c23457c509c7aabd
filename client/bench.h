// tpserve-cli bench: a serving benchmark in the style of vllm bench serve.
//
// A run sends num_prompts requests, each streamed with ignore_eos and max_tokens = its
// output length, so that it produces exactly that many tokens. The requests come from a
// dataset: the random one (RandomDataset: random token ids, lengths around input_len and
// output_len, optionally after a shared prefix) or a ShareGPT file (bench_dataset.h).
// Requests arrive all at once, or with gaps of mean 1/request_rate (Poisson, or gamma
// with --burstiness); at most `concurrency` are in flight (0: no limit). Warm-ups go
// first, one at a time, uncounted. One thread per request; RunBench blocks until all
// have ended.
//
// Two backends send the same requests: gRPC Generate streams (GrpcTimer, here) and the
// OpenAI-compatible HTTP API's streamed /v1/completions (OpenAiTimer, openai_bench.h).
// Both time a request with RequestClock, so their reports compare.
#ifndef TPSERVE_CLIENT_BENCH_H_
#define TPSERVE_CLIENT_BENCH_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/bench_stats.h"
#include "tpserve/v1/inference.grpc.pb.h"

namespace tpserve {

enum class BenchBackend { kGrpc, kOpenAi };

struct BenchOptions {
  // The random dataset's lengths: each request's drawn uniformly from
  // [len × (1 − random_range_ratio), len × (1 + random_range_ratio)] (at least 1), as
  // vllm bench serve's --random-range-ratio; 0: every request exactly input_len and
  // output_len. Warm-ups use them with every dataset.
  int input_len = 32;
  double random_range_ratio = 0;  // in [0, 1)
  int prefix_len = 0;  // shared tokens before each prompt's own input_len
  int output_len = 32;
  int num_prompts = 64;
  int concurrency = 0;      // 0: no limit
  double request_rate = 0;  // requests/s, Poisson arrivals; 0: all at once
  // Gaps between arrivals are gamma-distributed with this shape and mean 1/request_rate,
  // as vllm bench serve's --burstiness: 1 is Poisson, below 1 burstier, above steadier.
  double burstiness = 1;
  int num_warmups = 0;  // requests sent one at a time before the measured run, not counted
  // "random", or "sharegpt" with dataset_path (bench_dataset.h); sharegpt_output_len
  // fixes every ShareGPT request's output length (0: its reply's length).
  std::string dataset_name = "random";
  std::string dataset_path;
  int sharegpt_output_len = 0;
  // Empty the server's prefix cache after the warm-ups (tpserve's ResetPrefixCache), so
  // that reruns with one seed compare.
  bool reset_prefix_cache = false;
  // Redraw a progress line on stderr as requests end (tpserve-cli: when it is a terminal).
  bool progress = false;
  ReportOptions report;  // --percentiles, --goodput
  std::string save_result;  // write the report as JSON to this file too
  // Each request's deadline, from sending it to its last token (--timeout-s, else 600 s):
  // a stream the server never ends fails as DEADLINE_EXCEEDED instead of hanging the run.
  absl::Duration stream_timeout = absl::Seconds(600);
  uint64_t seed = 0;
  float temperature = 0;
  BenchBackend backend = BenchBackend::kGrpc;
  std::string openai_url;  // kOpenAi: "http://HOST:PORT", optionally with a path ("/v1")
  std::string api_key;     // kOpenAi: sent as "Authorization: Bearer KEY"; "": none
  // kOpenAi against a server that is not tpserve: the prompts' id range and the "model"
  // to send, instead of asking --target's GetModelInfo (vocab_size 0: ask it).
  int vocab_size = 0;
  std::string model;
};

// One request's clock, started at construction (when the request is sent): TTFT at the
// first chunk that carries tokens, an ITL gap between each later one and the one before.
class RequestClock {
 public:
  RequestClock() : start_(absl::Now()) {}
  // A chunk of `tokens` output tokens arrived now; a chunk without tokens counts nothing.
  void Chunk(int tokens, RequestTiming* timing);
  // The request ended now.
  void Finish(RequestTiming* timing) const;

 private:
  const absl::Time start_;
  double last_s_ = 0;  // when the last chunk with tokens arrived
};

// One request of a run: its prompt and the tokens it asks for.
struct BenchPrompt {
  std::vector<int32_t> ids;
  int output_len = 0;
  bool operator==(const BenchPrompt& o) const {
    return ids == o.ids && output_len == o.output_len;
  }
};

// Sends one request and times it; called from many threads at once.
using RequestTimer = std::function<RequestTiming(const BenchPrompt& prompt)>;

// [low, high] of lengths within `ratio` of `length`: floor(length × (1 − ratio)) (at least
// 1) to ceil(length × (1 + ratio)).
struct LengthRange {
  int low = 0;
  int high = 0;
};
LengthRange RangeAround(int length, double ratio);

// `count` requests of the random dataset: prefix_len shared tokens, then a length drawn
// from RangeAround(input_len, random_range_ratio) of random ids in [0, vocab_size), each
// asking for a length drawn from RangeAround(output_len, ...). Fixed by `seed`; with ratio
// 0 the ids are SharedPrefixPrompts(count, prefix_len, input_len, vocab_size, seed).
std::vector<BenchPrompt> RandomDataset(const BenchOptions& options, int count, int vocab_size,
                                       uint64_t seed);

std::vector<std::vector<int32_t>> RandomPrompts(int count, int length, int vocab_size,
                                                uint64_t seed);
// RandomPrompts, each after the same prefix_len random tokens (drawn from their own
// stream, so the prompts' own tokens do not depend on prefix_len).
std::vector<std::vector<int32_t>> SharedPrefixPrompts(int count, int prefix_len, int length,
                                                      int vocab_size, uint64_t seed);
// Send times in seconds from the start: gaps of mean 1/rate (0: all zero), exponential
// when burstiness is 1, else gamma with shape `burstiness`.
std::vector<double> ArrivalOffsets(int count, double rate, uint64_t seed, double burstiness = 1);

// The gRPC backend: each request a Generate stream on `stub`, which must outlive it.
RequestTimer GrpcTimer(v1::Inference::Stub& stub, const BenchOptions& options);

// What a run calls beside the timer; each may be empty.
struct BenchHooks {
  // After the warm-ups, before the first measured request (ResetPrefixCache); an error
  // ends the run with it.
  std::function<absl::Status()> before_run;
  // As each measured request ends, from its thread: how many have ended.
  std::function<void(int done)> on_done;
};

// Runs `warmups` one at a time, then `prompts` as options say (rate, burstiness,
// concurrency), and reports on the measured ones.
absl::StatusOr<BenchReport> RunBench(const BenchOptions& options,
                                     const std::vector<BenchPrompt>& prompts,
                                     const std::vector<BenchPrompt>& warmups,
                                     const RequestTimer& timer, const BenchHooks& hooks = {});

}  // namespace tpserve

#endif  // TPSERVE_CLIENT_BENCH_H_
