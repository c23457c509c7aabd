// tpserve-cli bench: a serving benchmark in the style of vLLM's benchmark_serving.
//
// num_prompts random prompts of input_len token ids (fixed seed, so runs compare) are
// streamed with max_tokens = output_len and ignore_eos, so every request produces
// exactly output_len tokens. With prefix_len > 0, every prompt starts with the same
// prefix_len random tokens (a shared system prompt) before its own input_len. Requests arrive all
// at once or as a Poisson process at request_rate per second; at most `concurrency` are in flight
// (0: no limit). One thread per request; RunBench blocks until all have ended.
#ifndef TPSERVE_CLIENT_BENCH_H_
#define TPSERVE_CLIENT_BENCH_H_

#include <cstdint>
#include <vector>

#include "client/bench_stats.h"
#include "tpserve/v1/inference.grpc.pb.h"

namespace tpserve {

struct BenchOptions {
  int input_len = 32;
  int prefix_len = 0;  // shared tokens before each prompt's own input_len
  int output_len = 32;
  int num_prompts = 64;
  int concurrency = 0;      // 0: no limit
  double request_rate = 0;  // requests/s, Poisson arrivals; 0: all at once
  uint64_t seed = 0;
  float temperature = 0;
};

std::vector<std::vector<int32_t>> RandomPrompts(int count, int length, int vocab_size,
                                                uint64_t seed);
// RandomPrompts, each after the same prefix_len random tokens (drawn from their own
// stream, so the prompts' own tokens do not depend on prefix_len).
std::vector<std::vector<int32_t>> SharedPrefixPrompts(int count, int prefix_len, int length,
                                                      int vocab_size, uint64_t seed);
// Send times in seconds from the start: exponential gaps of mean 1/rate (0: all zero).
std::vector<double> ArrivalOffsets(int count, double rate, uint64_t seed);

BenchReport RunBench(v1::Inference::Stub& stub, const BenchOptions& options, int vocab_size);

}  // namespace tpserve

#endif  // TPSERVE_CLIENT_BENCH_H_
