#include "client/commands.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/grpc_status.h"
#include "base/status_macros.h"
#include "client/bench_dataset.h"
#include "client/openai_bench.h"
#include "client/progress.h"
#include "client/output.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace tpserve {
namespace {

void SetDeadline(const Cli& cli, grpc::ClientContext* context) {
  if (cli.timeout_s <= 0) return;
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(cli.timeout_s * 1e6)));
}

int Fail(const Cli& cli, const grpc::Status& status) {
  if (cli.json) {
    std::cout << ErrorJson(status).dump() << std::endl;
  } else {
    std::cerr << ErrorLine(status) << std::endl;
  }
  return 1;
}

void PrintJson(const nlohmann::json& value) { std::cout << value.dump() << std::endl; }

grpc::Status StreamGenerate(const Cli& cli, const v1::GenerateRequest& request,
                            v1::GenerateResponse* whole) {
  grpc::ClientContext context;
  SetDeadline(cli, &context);
  auto reader = cli.stub->Generate(&context, request);
  v1::GenerateResponse chunk;
  while (reader->Read(&chunk)) {
    AppendGenerateChunk(chunk, whole);
    if (!cli.json) std::cout << chunk.text() << std::flush;
  }
  return reader->Finish();
}

// One chat choice, gathered from its chunks.
struct ChatAnswer {
  std::string content;
  std::string reasoning;
  std::vector<v1::ToolCall> tool_calls;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  v1::Usage usage;
};

void AddChatChunk(const v1::ChatResponse& chunk, ChatAnswer* answer) {
  answer->content += chunk.content();
  answer->reasoning += chunk.reasoning_content();
  for (const v1::ToolCallDelta& d : chunk.tool_calls()) {
    while (static_cast<int>(answer->tool_calls.size()) <= d.index()) answer->tool_calls.emplace_back();
    v1::ToolCall& call = answer->tool_calls[d.index()];
    if (!d.id().empty()) call.set_id(d.id());
    if (!d.name().empty()) call.set_name(d.name());
    call.mutable_arguments_json()->append(d.arguments_json());
  }
  if (chunk.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
    answer->finish = chunk.finish_reason();
    answer->usage = chunk.usage();
  }
}

nlohmann::json ChatJson(const ChatAnswer& a) {
  nlohmann::json calls = nlohmann::json::array();
  for (const v1::ToolCall& c : a.tool_calls) {
    calls.push_back({{"id", c.id()}, {"name", c.name()}, {"arguments", c.arguments_json()}});
  }
  return {{"content", a.content},
          {"reasoning_content", a.reasoning},
          {"tool_calls", calls},
          {"finish_reason", FinishReasonName(a.finish)},
          {"usage",
           {{"prompt_tokens", a.usage.prompt_tokens()},
            {"completion_tokens", a.usage.completion_tokens()},
            {"cached_prompt_tokens", a.usage.cached_prompt_tokens()}}}};
}

// What a person reads after the answer's text: its tool calls and how it ended.
std::string ChatTrailer(const ChatAnswer& a) {
  std::string out;
  for (const v1::ToolCall& c : a.tool_calls) {
    absl::StrAppend(&out, "tool call ", c.id(), ": ", c.name(), "(", c.arguments_json(), ")\n");
  }
  absl::StrAppend(&out, "finish_reason: ", FinishReasonName(a.finish),
                  "  prompt_tokens: ", a.usage.prompt_tokens(),
                  "  completion_tokens: ", a.usage.completion_tokens(), "\n");
  return out;
}

// One turn: streamed (reasoning to stderr, content to stdout as it arrives) unless n > 1.
grpc::Status RunChat(const Cli& cli, const v1::ChatRequest& request, bool stream,
                     std::vector<ChatAnswer>* answers) {
  grpc::ClientContext context;
  SetDeadline(cli, &context);
  if (!stream || request.sampling().n() > 1) {
    v1::ChatResponse whole;
    grpc::Status status = cli.stub->ChatUnary(&context, request, &whole);
    if (!status.ok()) return status;
    if (whole.choices_size() == 0) {
      answers->emplace_back();
      AddChatChunk(whole, &answers->back());
    }
    for (const v1::ChatResponse& choice : whole.choices()) {
      answers->emplace_back();
      AddChatChunk(choice, &answers->back());
    }
    return status;
  }
  answers->emplace_back();
  auto reader = cli.stub->Chat(&context, request);
  v1::ChatResponse chunk;
  while (reader->Read(&chunk)) {
    AddChatChunk(chunk, &answers->back());
    if (cli.json) continue;
    if (!chunk.reasoning_content().empty()) std::cerr << chunk.reasoning_content() << std::flush;
    std::cout << chunk.content() << std::flush;
  }
  return reader->Finish();
}

}  // namespace

int ChatCommand(const Cli& cli, v1::ChatRequest request, bool stream, bool interactive) {
  for (bool first = true;; first = false) {
    // The first turn is the conversation as given (interactive: when it ends with the
    // user's turn); every later one starts with a line read.
    const bool given = first && request.messages_size() > 0 &&
                       (!interactive ||
                        request.messages(request.messages_size() - 1).role() == "user");
    if (!given) {
      if (!interactive) break;
      if (!cli.json) std::cout << "> " << std::flush;
      std::string line;
      if (!std::getline(std::cin, line)) return 0;
      v1::ChatMessage* user = request.add_messages();
      user->set_role("user");
      user->set_content(line);
    }
    std::vector<ChatAnswer> answers;
    const grpc::Status status = RunChat(cli, request, stream, &answers);
    if (!status.ok()) {
      if (stream && !cli.json) std::cout << std::endl;
      if (!interactive) return Fail(cli, status);
      Fail(cli, status);
      request.mutable_messages()->RemoveLast();  // that turn is dropped; try another
      continue;
    }
    if (cli.json) {
      nlohmann::json choices = nlohmann::json::array();
      for (const ChatAnswer& a : answers) choices.push_back(ChatJson(a));
      PrintJson(answers.size() == 1 ? choices[0] : nlohmann::json{{"choices", choices}});
    } else {
      for (size_t i = 0; i < answers.size(); ++i) {
        const bool streamed = stream && answers.size() == 1;
        if (answers.size() > 1) std::cout << "choice " << i << ":\n";
        if (!streamed) std::cout << answers[i].content;
        std::cout << "\n" << ChatTrailer(answers[i]) << std::flush;
      }
    }
    // The conversation goes on with the (first) answer.
    v1::ChatMessage* assistant = request.add_messages();
    assistant->set_role("assistant");
    if (!answers[0].content.empty() || answers[0].tool_calls.empty()) {
      assistant->set_content(answers[0].content);
    }
    for (const v1::ToolCall& c : answers[0].tool_calls) *assistant->add_tool_calls() = c;
    if (!interactive) break;
  }
  return 0;
}

int GenerateCommand(const Cli& cli, const v1::GenerateRequest& request, bool stream) {
  v1::GenerateResponse whole;
  grpc::Status status;
  if (stream) {
    status = StreamGenerate(cli, request, &whole);
  } else {
    grpc::ClientContext context;
    SetDeadline(cli, &context);
    status = cli.stub->GenerateUnary(&context, request, &whole);
    if (status.ok() && !cli.json && whole.choices_size() == 0) std::cout << whole.text();
  }
  if (!status.ok()) {
    if (stream && !cli.json) std::cout << std::endl;
    return Fail(cli, status);
  }
  if (whole.choices_size() > 0) {  // --n > 1
    if (cli.json) {
      nlohmann::json choices = nlohmann::json::array();
      for (const v1::GenerateResponse& choice : whole.choices()) {
        choices.push_back(GenerateJson(choice));
      }
      PrintJson({{"choices", choices}});
    } else {
      for (const v1::GenerateResponse& choice : whole.choices()) {
        std::cout << "completion " << choice.index() << ":\n"
                  << choice.text() << "\n"
                  << GenerateTrailer(choice);
      }
      std::cout << std::flush;
    }
    return 0;
  }
  if (cli.json) {
    PrintJson(GenerateJson(whole));
  } else {
    std::cout << "\n" << GenerateTrailer(whole) << std::flush;
  }
  return 0;
}

int TokenizeCommand(const Cli& cli, const v1::TokenizeRequest& request) {
  grpc::ClientContext context;
  SetDeadline(cli, &context);
  v1::TokenizeResponse response;
  const grpc::Status status = cli.stub->Tokenize(&context, request, &response);
  if (!status.ok()) return Fail(cli, status);
  const std::vector<int32_t> ids(response.token_ids().begin(), response.token_ids().end());
  if (cli.json) {
    PrintJson({{"token_ids", ids}});
  } else {
    std::cout << absl::StrJoin(ids, ",") << std::endl;
  }
  return 0;
}

int DetokenizeCommand(const Cli& cli, const v1::DetokenizeRequest& request) {
  grpc::ClientContext context;
  SetDeadline(cli, &context);
  v1::DetokenizeResponse response;
  const grpc::Status status = cli.stub->Detokenize(&context, request, &response);
  if (!status.ok()) return Fail(cli, status);
  if (cli.json) {
    PrintJson({{"text", response.text()}});
  } else {
    std::cout << response.text() << std::endl;
  }
  return 0;
}

int32_t DefaultMaxTokens(const Cli& cli, const v1::GenerateRequest& request) {
  v1::ModelInfo info;
  {
    grpc::ClientContext context;
    SetDeadline(cli, &context);
    if (!cli.stub->GetModelInfo(&context, {}, &info).ok()) return kDefaultMaxTokens;
  }
  const int64_t want = info.generation_max_new_tokens() > 0 ? info.generation_max_new_tokens()
                                                            : kDefaultMaxTokens;
  int64_t prompt = request.token_ids().ids_size();
  if (request.prompt_case() == v1::GenerateRequest::kText) {
    v1::TokenizeRequest tokenize;
    tokenize.set_text(request.text());
    if (request.has_add_special_tokens()) {
      tokenize.set_add_special_tokens(request.add_special_tokens());
    }
    v1::TokenizeResponse tokens;
    grpc::ClientContext context;
    SetDeadline(cli, &context);
    if (!cli.stub->Tokenize(&context, tokenize, &tokens).ok()) return static_cast<int32_t>(want);
    prompt = tokens.token_ids_size();
  }
  // At least 1: a prompt that fills the context is then refused by name by the server.
  return static_cast<int32_t>(std::max<int64_t>(1, std::min(want, info.max_context() - prompt)));
}

int InfoCommand(const Cli& cli) {
  grpc::ClientContext context;
  SetDeadline(cli, &context);
  v1::ModelInfo info;
  const grpc::Status status = cli.stub->GetModelInfo(&context, {}, &info);
  if (!status.ok()) return Fail(cli, status);
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  options.add_whitespace = !cli.json;
  std::string text;
  (void)google::protobuf::util::MessageToJsonString(info, &text, options);
  std::cout << text << (cli.json ? "\n" : "") << std::flush;
  return 0;
}

int HealthCommand(const Cli& cli) {
  auto health = grpc::health::v1::Health::NewStub(cli.channel);
  grpc::ClientContext context;
  SetDeadline(cli, &context);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = health->Check(&context, {}, &response);
  if (!status.ok()) return Fail(cli, status);
  const std::string name = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
  if (cli.json) {
    PrintJson({{"status", name}});
  } else {
    std::cout << name << std::endl;
  }
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

int ResetPrefixCacheCommand(const Cli& cli) {
  grpc::ClientContext context;
  SetDeadline(cli, &context);
  v1::ResetPrefixCacheResponse response;
  const grpc::Status status = cli.stub->ResetPrefixCache(&context, {}, &response);
  if (!status.ok()) return Fail(cli, status);
  if (cli.json) {
    PrintJson({{"blocks_dropped", response.blocks_dropped()}});
  } else {
    std::cout << "prefix cache emptied: " << response.blocks_dropped() << " blocks dropped"
              << std::endl;
  }
  return 0;
}

namespace {

// The measured requests: the random dataset, or a ShareGPT file tokenized by the server
// and kept within its context.
absl::StatusOr<std::vector<BenchPrompt>> BenchDataset(const Cli& cli, const BenchOptions& o,
                                                      const v1::ModelInfo& info) {
  if (o.dataset_name != "sharegpt") {
    const LengthRange in = RangeAround(o.input_len, o.random_range_ratio);
    const LengthRange out = RangeAround(o.output_len, o.random_range_ratio);
    const int64_t longest = int64_t{o.prefix_len} + in.high + out.high;
    if (info.max_context() > 0 && longest > info.max_context()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bench: the longest request (--prefix-len + --input-len + --output-len, with "
          "--random-range-ratio: ", longest, " tokens) exceeds the server's max_context ",
          info.max_context()));
    }
    return RandomDataset(o, o.num_prompts, info.vocab_size(), o.seed);
  }
  TPSERVE_ASSIGN_OR_RETURN(const std::vector<Conversation> conversations,
                           ReadShareGpt(o.dataset_path));
  const TokenizeFn tokenize = [&cli](const std::string& text, bool special)
      -> absl::StatusOr<std::vector<int32_t>> {
    grpc::ClientContext context;
    SetDeadline(cli, &context);
    v1::TokenizeRequest request;
    request.set_text(text);
    request.set_add_special_tokens(special);
    v1::TokenizeResponse response;
    const grpc::Status status = cli.stub->Tokenize(&context, request, &response);
    if (!status.ok()) return ToAbslStatus(status);
    return std::vector<int32_t>(response.token_ids().begin(), response.token_ids().end());
  };
  ShareGptOptions sharegpt;
  sharegpt.num_prompts = o.num_prompts;
  sharegpt.seed = o.seed;
  sharegpt.output_len = o.sharegpt_output_len;
  sharegpt.max_total_len = std::min(sharegpt.max_total_len, info.max_context());
  sharegpt.max_prompt_len = std::min(sharegpt.max_prompt_len, info.max_context());
  return ShareGptPrompts(conversations, sharegpt, tokenize, o.dataset_path);
}

}  // namespace

int BenchCommand(const Cli& cli, const BenchOptions& options) {
  // Another engine's server (--vocab-size given): no tpserve to ask for its info.
  const bool tpserve = options.vocab_size == 0;
  v1::ModelInfo info;
  if (tpserve) {
    grpc::ClientContext context;
    SetDeadline(cli, &context);
    const grpc::Status status = cli.stub->GetModelInfo(&context, {}, &info);
    if (!status.ok()) return Fail(cli, status);
  } else {
    info.set_vocab_size(options.vocab_size);
  }
  RequestTimer timer = tpserve ? GrpcTimer(*cli.stub, options) : RequestTimer();
  if (options.backend == BenchBackend::kOpenAi) {
    // The HTTP API (tpserve's behind --target, or another's); each call within
    // options.stream_timeout, as the gRPC streams.
    absl::StatusOr<RequestTimer> http = OpenAiTimer(
        options, options.model.empty() ? info.model_name() : options.model, options.stream_timeout);
    if (!http.ok()) return Fail(cli, ToGrpcStatus(http.status()));
    timer = *std::move(http);
  }
  absl::StatusOr<std::vector<BenchPrompt>> prompts = BenchDataset(cli, options, info);
  if (!prompts.ok()) return Fail(cli, ToGrpcStatus(prompts.status()));
  // Warm-ups: random prompts of their own (another seed, so they seed no prefix-cache hit).
  const std::vector<BenchPrompt> warmups =
      RandomDataset(options, options.num_warmups, info.vocab_size(), ~options.seed);
  BenchHooks hooks;
  if (options.reset_prefix_cache) {
    hooks.before_run = [&cli]() -> absl::Status {
      grpc::ClientContext context;
      SetDeadline(cli, &context);
      v1::ResetPrefixCacheResponse response;
      return ToAbslStatus(cli.stub->ResetPrefixCache(&context, {}, &response));
    };
  }
  std::unique_ptr<ProgressBar> progress;
  if (options.progress && isatty(STDERR_FILENO)) {
    progress = std::make_unique<ProgressBar>(std::cerr, "bench", options.num_prompts);
    hooks.on_done = [&progress](int done) { progress->Update(done); };
  }
  absl::StatusOr<BenchReport> run = RunBench(options, *prompts, warmups, timer, hooks);
  if (progress != nullptr) progress->Finish();
  if (!run.ok()) return Fail(cli, ToGrpcStatus(run.status()));
  BenchReport report = *std::move(run);
  grpc::ClientContext after_context;
  SetDeadline(cli, &after_context);
  v1::ModelInfo after;
  if (tpserve && cli.stub->GetModelInfo(&after_context, {}, &after).ok()) {
    AddStepCounters(after.engine_steps() - info.engine_steps(),
                    after.step_wall_us() - info.step_wall_us(),
                    after.worker_compute_us() - info.worker_compute_us(), &report);
  }
  if (cli.json) {
    PrintJson(ReportJson(report));
  } else {
    std::cout << ReportText(report) << std::flush;
  }
  if (!options.save_result.empty()) {
    std::ofstream file(options.save_result);
    file << ReportJson(report).dump(2) << "\n";
    file.close();
    if (!file) {
      std::cerr << "tpserve-cli: bench: cannot write --save-result " << options.save_result
                << std::endl;
      return 1;
    }
  }
  return report.failed == 0 ? 0 : 1;
}

}  // namespace tpserve
