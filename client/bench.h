// tpserve-cli bench: a serving benchmark in the style of vLLM's benchmark_serving.
//
// num_prompts random prompts of input_len token ids (fixed seed, so runs compare) are
// streamed with max_tokens = output_len and ignore_eos, so every request produces
// exactly output_len tokens. With prefix_len > 0, every prompt starts with the same
// prefix_len random tokens (a shared system prompt) before its own input_len. Requests arrive all
// at once or as a Poisson process at request_rate per second; at most `concurrency` are in flight
// (0: no limit). One thread per request; RunBench blocks until all have ended.
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

#include "absl/time/time.h"
#include "client/bench_stats.h"
#include "tpserve/v1/inference.grpc.pb.h"

namespace tpserve {

enum class BenchBackend { kGrpc, kOpenAi };

struct BenchOptions {
  int input_len = 32;
  int prefix_len = 0;  // shared tokens before each prompt's own input_len
  int output_len = 32;
  int num_prompts = 64;
  int concurrency = 0;      // 0: no limit
  double request_rate = 0;  // requests/s, Poisson arrivals; 0: all at once
  // Gaps between arrivals are gamma-distributed with this shape and mean 1/request_rate,
  // as vllm bench serve's --burstiness: 1 is Poisson, below 1 burstier, above steadier.
  double burstiness = 1;
  int num_warmups = 0;  // requests sent one at a time before the measured run, not counted
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

// Sends one prompt and times it; called from many threads at once.
using RequestTimer = std::function<RequestTiming(const std::vector<int32_t>& prompt)>;

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

BenchReport RunBench(const BenchOptions& options, int vocab_size, const RequestTimer& timer);

}  // namespace tpserve

#endif  // TPSERVE_CLIENT_BENCH_H_
