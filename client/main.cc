// tpserve-cli: command-line client of a tpserve server.
//
//   tpserve-cli --help, tpserve-cli COMMAND --help: the flags, with their defaults.
//   tpserve-cli [--target host:port] [--json] [--timeout-s S] [--tls-ca-file F]
//               [--tls-cert-file F --tls-key-file F] [--api-key-file F] COMMAND ...
//     generate "text" | --token-ids 1,2,3  [--stream] [sampling flags]
//     chat "message" [--system S] [--messages-file F] [--tools-file F] [--tool-choice C]
//          [--template-kwargs JSON] [--interactive] [--stream] [sampling flags]
//     tokenize "text"          detokenize 1,2,3
//     info                     health                    reset-prefix-cache
//     bench [--input-len N] [--prefix-len N] [--output-len N] [--random-range-ratio R]
//           [--dataset-name sharegpt --dataset-path FILE [--sharegpt-output-len N]]
//           [--num-prompts N] [--concurrency N | --request-rate R [--burstiness B]]
//           [--seed S] [--num-warmups N] [--reset-prefix-cache] [--percentiles 50,90,99]
//           [--goodput ttft:MS,tpot:MS,e2el:MS] [--save-result FILE] [--disable-tqdm]
//           [--backend grpc | --backend openai --openai-url http://HOST:PORT]
//
// Exit codes: 0 success, 1 the server answered with an error (or is not serving),
// 2 bad command line (unusable TLS or API-key files included).
#include <cmath>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/args.h"
#include "base/status_macros.h"
#include "base/utf8.h"
#include "base/version.h"
#include "client/channel.h"
#include "client/chat_flags.h"
#include "client/commands.h"
#include "client/generate_flags.h"
#include "client/openai_bench.h"
#include "client/output.h"
#include "server/auth.h"

namespace tpserve {
namespace {

struct Flags {
  ChannelFlags channel{"localhost:50051"};
  bool json = false;
  bool stream = false;
  double timeout_s = 0;
  std::vector<std::string> positional;  // the command's one argument
  GenerateFlags generate;
  ChatFlags chat;
  int64_t input_len = 32, prefix_len = 0, output_len = 32, num_prompts = 64, concurrency = 0;
  double request_rate = 0, burstiness = 1, random_range_ratio = 0;
  int64_t num_warmups = 0;
  std::string dataset_name = "random";
  std::string dataset_path;
  int64_t sharegpt_output_len = 0;
  bool reset_prefix_cache = false;
  bool disable_progress = false;
  std::string percentiles = "99";
  std::vector<std::string> goodput;
  std::string save_result;
  std::string backend = "grpc";
  std::string openai_url;
  int64_t vocab_size = 0;
  std::string model;
};

void RegisterConnection(ArgParser& args, Flags& f) {
  args.SetEnvPrefix("TPSERVE_");
  args.AddString("target", &f.channel.target, "server address host:port");
  args.SetEnvPrefix("");
  args.AddString("tls-ca-file", &f.channel.tls_ca_file,
                 "connect with TLS, the server's certificate signed by these PEM CAs (TLS "
                 "without it: the system's roots)");
  args.AddString("tls-cert-file", &f.channel.tls_cert_file,
                 "TLS: this client's PEM certificate chain, for a server that requires one");
  args.AddString("tls-key-file", &f.channel.tls_key_file, "the PEM private key of --tls-cert-file");
  args.AddString("api-key-file", &f.channel.api_key_file,
                 "send \"authorization: Bearer KEY\" on every call, KEY this file's first key");
  args.AddString("load-balancing", &f.channel.load_balancing,
                 "pick_first (gRPC's default) or round_robin: spread calls over every address "
                 "--target resolves to (dns:///NAME:PORT of a headless Service's replicas)");
  args.AddBool("json", &f.json, "print one JSON object");
  args.AddDouble("timeout-s", &f.timeout_s,
                 "deadline of each call, seconds (0: none; bench streams: 600)");
}

void RegisterBench(ArgParser& args, Flags& f) {
  args.AddString("dataset-name", &f.dataset_name,
                 "random (token ids drawn by --seed) or sharegpt (--dataset-path)");
  args.AddString("dataset-path", &f.dataset_path,
                 "a ShareGPT-format JSON file: each conversation's first turn the prompt, its "
                 "second the reply whose length is asked for");
  args.AddInt("sharegpt-output-len", &f.sharegpt_output_len,
              "sharegpt: ask every request for this many tokens instead (0: the reply's)");
  args.AddInt("input-len,random-input-len", &f.input_len,
              "prompt tokens (random dataset and warm-ups)");
  args.AddInt("prefix-len,random-prefix-len", &f.prefix_len,
              "tokens of a prefix shared by every prompt, before its own --input-len");
  args.AddInt("output-len,random-output-len", &f.output_len,
              "generated tokens per request (random dataset and warm-ups)");
  args.AddDouble("random-range-ratio", &f.random_range_ratio,
                 "draw each request's input and output lengths from [len*(1-R), len*(1+R)], "
                 "R in [0, 1)");
  args.AddInt("num-prompts", &f.num_prompts, "requests");
  args.AddInt("concurrency,max-concurrency", &f.concurrency,
              "most requests in flight (0: no limit)");
  args.AddDouble("request-rate", &f.request_rate, "Poisson arrivals per second (0: all at once)");
  args.AddDouble("burstiness", &f.burstiness,
                 "with --request-rate: gamma-distributed gaps of this shape (1: Poisson; below "
                 "1 burstier)");
  args.AddInt("num-warmups", &f.num_warmups,
              "requests sent one at a time before the run, not counted");
  args.AddBool("reset-prefix-cache", &f.reset_prefix_cache,
               "empty the server's prefix cache after the warm-ups (a server started with "
               "--allow-reset-prefix-cache), so reruns with one seed compare");
  args.AddBool("disable-tqdm,no-progress", &f.disable_progress,
               "no progress line on stderr (drawn only when stderr is a terminal)");
  args.AddString("percentiles,metric-percentiles", &f.percentiles,
                 "percentiles reported of TTFT, TPOT, ITL and E2E, e.g. 50,90,99");
  args.AddRepeated("goodput", &f.goodput,
                   "an SLO, ttft:MS, tpot:MS or e2el:MS (repeatable, or comma-separated): "
                   "goodput counts the requests that meet every one");
  args.AddString("save-result", &f.save_result, "also write the report as JSON here");
  args.AddString("backend", &f.backend,
                 "grpc (Generate streams on --target) or openai (streamed /v1/completions at "
                 "--openai-url; --target still gives the model's info)");
  args.AddString("openai-url", &f.openai_url,
                 "--backend openai: the server's HTTP API, http://HOST:PORT (tpserve "
                 "--http-port)");
  args.AddInt("vocab-size", &f.vocab_size,
              "--backend openai: prompt ids are drawn from [0, N) and no tpserve --target is "
              "asked for the model's info (another engine's server)");
  args.AddString("model", &f.model,
                 "--backend openai: the \"model\" to send (default: --target's name; with "
                 "--vocab-size and no --model none is sent)");
  args.AddInt("seed", &f.generate.seed, "seed of the prompts, arrivals and sampling");
  args.AddDouble("temperature", &f.generate.temperature, "sampling temperature (default: greedy)");
}

void Register(ArgParser& args, Flags& f) {
  RegisterConnection(args, f);
  args.SetVersion(VersionText("tpserve-cli"));
  ArgParser& generate = args.AddCommand("generate", "complete a prompt, text or --token-ids");
  generate.AddPositional("prompt", &f.positional, 1, "the prompt text");
  generate.AddBool("stream", &f.stream, "print text as it arrives");
  AddGenerateFlags(generate, &f.generate);
  ArgParser& chat = args.AddCommand("chat", "answer a chat message with the model's template");
  chat.AddPositional("message", &f.positional, 1, "the user's message");
  chat.AddBool("stream", &f.stream, "print text as it arrives");
  AddChatFlags(chat, &f.chat);
  AddGenerateFlags(chat, &f.generate);
  ArgParser& tokenize = args.AddCommand("tokenize", "the token ids of a text");
  tokenize.AddPositional("text", &f.positional, 1, "the text");
  tokenize.AddBool("no-special-tokens", &f.generate.no_special_tokens,
                   "do not add BOS etc. to the text");
  ArgParser& detokenize = args.AddCommand("detokenize", "the text of token ids");
  detokenize.AddPositional("ids", &f.positional, 1, "token ids: 1,2,3");
  detokenize.AddBool("keep-special-tokens", &f.generate.keep_special_tokens,
                     "keep special tokens in the text");
  args.AddCommand("info", "the served model: name, context, vocabulary, limits");
  args.AddCommand("health", "the server's grpc.health.v1 status");
  args.AddCommand("reset-prefix-cache",
                  "empty the server's prefix cache (a server started with "
                  "--allow-reset-prefix-cache)");
  RegisterBench(args.AddCommand("bench", "load-test the server (as vllm bench serve)"), f);
}

int Usage(const ArgParser& args, const std::string& problem) {
  std::cerr << "tpserve-cli: " << problem << "\n" << args.HelpHint() << "\n";
  return 2;
}

// A request the CLI will not send: a JSON error with --json, else the usage text.
int BadRequest(const ArgParser& args, const Cli& cli, const absl::Status& status) {
  if (!cli.json) return Usage(args, std::string(status.message()));
  std::cout << ErrorJson(grpc::Status(grpc::INVALID_ARGUMENT, std::string(status.message())))
                   .dump()
            << std::endl;
  return 2;
}

absl::StatusOr<BenchOptions> BenchFrom(const ArgParser& args, const Flags& f) {
  BenchOptions o;
  if (f.input_len < 1 || f.output_len < 1 || f.num_prompts < 1 || f.concurrency < 0 ||
      f.request_rate < 0 || f.prefix_len < 0 || f.input_len + f.prefix_len > (1 << 30) ||
      f.output_len > (1 << 30) || f.num_prompts > 10000000) {
    return absl::InvalidArgumentError(
        "bench needs --input-len, --output-len, --num-prompts >= 1, --concurrency >= 0, "
        "--prefix-len >= 0 and --request-rate >= 0");
  }
  if (!(f.random_range_ratio >= 0 && f.random_range_ratio < 1)) {
    return absl::InvalidArgumentError("--random-range-ratio must be in [0, 1)");
  }
  o.random_range_ratio = f.random_range_ratio;
  if (f.dataset_name == "sharegpt") {
    if (f.dataset_path.empty()) {
      return absl::InvalidArgumentError("--dataset-name sharegpt needs --dataset-path FILE");
    }
    if (f.sharegpt_output_len < 0 || f.sharegpt_output_len > (1 << 30)) {
      return absl::InvalidArgumentError("--sharegpt-output-len must be in [0, 1073741824]");
    }
  } else if (f.dataset_name == "random") {
    if (!f.dataset_path.empty() || f.sharegpt_output_len != 0) {
      return absl::InvalidArgumentError(
          "--dataset-path and --sharegpt-output-len need --dataset-name sharegpt");
    }
  } else {
    return absl::InvalidArgumentError("--dataset-name is random or sharegpt");
  }
  o.dataset_name = f.dataset_name;
  o.dataset_path = f.dataset_path;
  o.sharegpt_output_len = static_cast<int>(f.sharegpt_output_len);
  o.reset_prefix_cache = f.reset_prefix_cache;
  o.progress = !f.disable_progress && !f.json;
  o.prefix_len = static_cast<int>(f.prefix_len);
  o.input_len = static_cast<int>(f.input_len);
  o.output_len = static_cast<int>(f.output_len);
  o.num_prompts = static_cast<int>(f.num_prompts);
  o.concurrency = static_cast<int>(f.concurrency);
  o.request_rate = f.request_rate;
  if (!(f.burstiness > 0) || !std::isfinite(f.burstiness)) {
    return absl::InvalidArgumentError("--burstiness must be a number > 0");
  }
  o.burstiness = f.burstiness;
  if (f.num_warmups < 0 || f.num_warmups > 100000) {
    return absl::InvalidArgumentError("--num-warmups must be in [0, 100000]");
  }
  o.num_warmups = static_cast<int>(f.num_warmups);
  TPSERVE_ASSIGN_OR_RETURN(o.report.percentiles, ParsePercentiles(f.percentiles));
  TPSERVE_RETURN_IF_ERROR(ParseGoodput(f.goodput, &o.report));
  o.save_result = f.save_result;
  if (f.timeout_s > 0) o.stream_timeout = absl::Seconds(f.timeout_s);
  o.seed = static_cast<uint64_t>(f.generate.seed);
  // Greedy unless asked, as vLLM's benchmark.
  o.temperature = args.Seen("temperature") ? static_cast<float>(f.generate.temperature) : 0.0f;
  if (f.backend == "grpc") {
    if (!f.openai_url.empty()) return absl::InvalidArgumentError("--openai-url needs --backend openai");
    if (f.vocab_size != 0 || !f.model.empty()) {
      return absl::InvalidArgumentError("--vocab-size and --model need --backend openai");
    }
    return o;
  }
  if (f.backend != "openai") return absl::InvalidArgumentError("--backend is grpc or openai");
  if (f.openai_url.empty()) {
    return absl::InvalidArgumentError("--backend openai needs --openai-url http://HOST:PORT");
  }
  o.backend = BenchBackend::kOpenAi;
  TPSERVE_RETURN_IF_ERROR(ParseOpenAiUrl(f.openai_url).status());
  o.openai_url = f.openai_url;
  if (f.vocab_size < 0 || f.vocab_size > (1 << 30)) {
    return absl::InvalidArgumentError("--vocab-size must be in [1, 1073741824]");
  }
  o.vocab_size = static_cast<int>(f.vocab_size);
  if (o.vocab_size != 0 && (o.dataset_name == "sharegpt" || o.reset_prefix_cache)) {
    return absl::InvalidArgumentError(
        "--dataset-name sharegpt and --reset-prefix-cache need tpserve at --target (its "
        "tokenizer, its ResetPrefixCache): not with --vocab-size");
  }
  o.model = f.model;
  if (!f.channel.api_key_file.empty()) {
    TPSERVE_ASSIGN_OR_RETURN(ApiKeys keys, ApiKeys::Load("api-key-file", f.channel.api_key_file));
    o.api_key = keys.first();
  }
  return o;
}

int Dispatch(const ArgParser& root, const Flags& f, const Cli& cli) {
  const ArgParser& args = root.command_parser();
  const std::string command = root.command();
  const std::string arg = f.positional.empty() ? "" : f.positional[0];
  if (command == "generate") {
    absl::StatusOr<v1::GenerateRequest> request = BuildGenerateRequest(args, f.generate, arg);
    if (!request.ok()) return BadRequest(args, cli, request.status());
    if (!request->sampling().has_max_tokens()) {
      request->mutable_sampling()->set_max_tokens(DefaultMaxTokens(cli, *request));
    }
    if (f.stream && request->sampling().n() > 1) {
      return BadRequest(args, cli,
                        absl::InvalidArgumentError(
                            "--stream prints one completion as it arrives; drop it for --n > 1"));
    }
    return GenerateCommand(cli, *request, f.stream);
  }
  if (command == "chat") {
    absl::StatusOr<v1::ChatRequest> request = BuildChatRequest(args, f.chat, f.generate, arg);
    if (!request.ok()) return BadRequest(args, cli, request.status());
    return ChatCommand(cli, *std::move(request), f.stream, f.chat.interactive);
  }
  if (command == "tokenize") {
    if (!ValidateUtf8(std::string_view(arg)).ok()) {
      return BadRequest(args, cli, absl::InvalidArgumentError("the text must be valid UTF-8"));
    }
    v1::TokenizeRequest request;
    request.set_text(arg);
    if (f.generate.no_special_tokens) request.set_add_special_tokens(false);
    return TokenizeCommand(cli, request);
  }
  if (command == "detokenize") {
    v1::DetokenizeRequest request;
    std::vector<int32_t> ids;
    if (absl::Status s = ParseIdList(arg, &ids); !s.ok()) return Usage(args, std::string(s.message()));
    request.mutable_token_ids()->Add(ids.begin(), ids.end());
    if (f.generate.keep_special_tokens) request.set_skip_special_tokens(false);
    return DetokenizeCommand(cli, request);
  }
  if (command == "info") return InfoCommand(cli);
  if (command == "health") return HealthCommand(cli);
  if (command == "reset-prefix-cache") return ResetPrefixCacheCommand(cli);
  absl::StatusOr<BenchOptions> options = BenchFrom(args, f);
  if (!options.ok()) return Usage(args, std::string(options.status().message()));
  return BenchCommand(cli, *options);
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  tpserve::Flags flags;
  tpserve::ArgParser args("tpserve-cli", "tpserve-cli: command-line client of a tpserve server.");
  tpserve::Register(args, flags);
  absl::StatusOr<tpserve::ArgParser::Action> action = args.Parse(argc, argv);
  if (!action.ok()) return tpserve::Usage(args, std::string(action.status().message()));
  if (*action == tpserve::ArgParser::Action::kExit) return 0;  // --help or --version
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = tpserve::OpenChannel(flags.channel);
  if (!channel.ok()) return tpserve::Usage(args, std::string(channel.status().message()));
  tpserve::Cli cli;
  cli.channel = *std::move(channel);
  cli.stub = tpserve::v1::Inference::NewStub(cli.channel);
  cli.json = flags.json;
  cli.timeout_s = flags.timeout_s;
  return tpserve::Dispatch(args, flags, cli);
}
