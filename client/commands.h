// The tpserve-cli subcommands, each one RPC (bench: many) against a connected channel.
// Each prints its result (JSON with --json, else human-readable) and returns the exit
// code: 0 on success, 1 when an RPC fails (the status is printed: as
// {"error": {...}} with --json) or the server is not serving.
#ifndef TPSERVE_CLIENT_COMMANDS_H_
#define TPSERVE_CLIENT_COMMANDS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/bench.h"
#include "grpcpp/grpcpp.h"
#include "tpserve/v1/inference.grpc.pb.h"

namespace tpserve {

struct Cli {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Inference::Stub> stub;
  bool json = false;
  double timeout_s = 0;  // per call; 0: none
};

// What a generate without --max-tokens asks for: the model's generation_config.json
// max_new_tokens (GetModelInfo), else kDefaultMaxTokens, no more than the room the prompt
// leaves in the context (counted by Tokenize for a text prompt); kDefaultMaxTokens when
// the server cannot say (the request then fails on its own).
inline constexpr int32_t kDefaultMaxTokens = 256;
int32_t DefaultMaxTokens(const Cli& cli, const v1::GenerateRequest& request);
int GenerateCommand(const Cli& cli, const v1::GenerateRequest& request, bool stream);
// Streams (or, with --n > 1, answers whole) one chat; `interactive`: then reads more user
// turns from stdin, one per line, each answered with the conversation so far.
int ChatCommand(const Cli& cli, v1::ChatRequest request, bool stream, bool interactive);
int TokenizeCommand(const Cli& cli, const v1::TokenizeRequest& request);
int DetokenizeCommand(const Cli& cli, const v1::DetokenizeRequest& request);
int InfoCommand(const Cli& cli);
int HealthCommand(const Cli& cli);
int ResetPrefixCacheCommand(const Cli& cli);
// Builds the dataset (the random one, or a ShareGPT file tokenized by the server), runs
// it (bench.h), prints the report and writes --save-result.
int BenchCommand(const Cli& cli, const BenchOptions& options);

}  // namespace tpserve

#endif  // TPSERVE_CLIENT_COMMANDS_H_
