#include "client/commands.h"

#include <chrono>
#include <cstdio>
#include <iostream>

#include "absl/strings/str_join.h"
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

}  // namespace

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

int BenchCommand(const Cli& cli, const BenchOptions& options) {
  grpc::ClientContext context;
  SetDeadline(cli, &context);
  v1::ModelInfo info;
  const grpc::Status status = cli.stub->GetModelInfo(&context, {}, &info);
  if (!status.ok()) return Fail(cli, status);
  BenchReport report = RunBench(*cli.stub, options, info.vocab_size());
  grpc::ClientContext after_context;
  SetDeadline(cli, &after_context);
  v1::ModelInfo after;
  if (cli.stub->GetModelInfo(&after_context, {}, &after).ok()) {
    AddStepCounters(after.engine_steps() - info.engine_steps(),
                    after.step_wall_us() - info.step_wall_us(),
                    after.worker_compute_us() - info.worker_compute_us(), &report);
  }
  if (cli.json) {
    PrintJson(ReportJson(report));
  } else {
    std::cout << ReportText(report) << std::flush;
  }
  return report.failed == 0 ? 0 : 1;
}

}  // namespace tpserve
