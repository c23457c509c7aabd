// tpserve: the frontend binary. Loads the model's config and tokenizer, serves
// tpserve.v1.Inference, grpc.health.v1 and reflection on one port, and keeps a worker
// pool and engine serving through PoolSupervisor. SIGTERM/SIGINT drain: health goes
// NOT_SERVING, no new calls are accepted, in-flight ones get --drain-grace-ms to
// finish (then end with FINISH_REASON_CANCELLED), the pool shuts down and the process
// exits 0. A pool that cannot start, or fails under --exit-on-pool-failure, exits 1; bad
// flags, and TLS or API-key files that cannot be used, exit 2. With --metrics-port, an
// HTTP listener serves Prometheus's /metrics.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/version.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "server/auth.h"
#include "server/chat/chat_template.h"
#include "server/http/http_routes.h"
#include "server/http/http_server.h"
#include "server/openai/openai_api.h"
#include "server/model_path.h"
#include "server/pool_supervisor.h"
#include "server/server_config.h"
#include "server/grpc/inference_service.h"
#include "server/serving_core.h"
#include "server/serving_setup.h"
#include "server/stats_log.h"
#include "server/tls_files.h"
#include "spdlog/spdlog.h"

namespace tpserve {
namespace {

// Health and the service's engine follow the supervisor until draining starts.
class ServingState {
 public:
  ServingState(ServingCore* core, grpc::Server* server, std::string address)
      : core_(core), server_(server), address_(std::move(address)) {}

  void OnEngine(std::shared_ptr<Engine> engine) {
    absl::MutexLock lock(&mu_);
    const bool serving = engine != nullptr && !draining_;
    if (engine != nullptr) core_->SetEngine(std::move(engine));
    if (!serving) core_->SetEngine(nullptr);
    server_->GetHealthCheckService()->SetServingStatus(serving);
    if (serving && !announced_) {
      spdlog::info("serving on {}", address_);
      announced_ = true;
    }
  }

  // Health stays NOT_SERVING from now on; in-flight calls keep their engine.
  void BeginDrain() {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    server_->GetHealthCheckService()->SetServingStatus(false);
  }

  // Blocks until Shutdown() was called (by a signal or by the supervisor ending).
  void WaitForShutdown() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&shutdown_));
  }
  // Whether Shutdown() was called within `timeout`.
  bool WaitForShutdownFor(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&shutdown_), timeout);
  }
  void Shutdown() {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
  }

 private:
  ServingCore* const core_;
  grpc::Server* const server_;
  const std::string address_;
  absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool announced_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

// Every connection (gRPC, the HTTP API's up to 4,096, the workers') is a descriptor: the
// soft limit goes up to the hard one (at most 65,536), as servers do, so the default
// soft 1,024 does not refuse the thousandth stream.
void RaiseDescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t wanted = limit.rlim_max == RLIM_INFINITY ? 65536 : std::min<rlim_t>(limit.rlim_max, 65536);
  if (limit.rlim_cur >= wanted) return;
  limit.rlim_cur = wanted;
  setrlimit(RLIMIT_NOFILE, &limit);
}

// SIGTERM and SIGINT are blocked in every thread and taken by one waiting thread.
sigset_t BlockShutdownSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// The largest request message the public port takes (gRPC's default is 4 MiB): a
// prompt of millions of token ids fits, a larger one is RESOURCE_EXHAUSTED.
constexpr int kMaxRequestBytes = 64 << 20;
// What gRPC may account to the public port's connections and calls (read buffers,
// messages being received): two of the largest requests. gRPC 1.51 takes in a whole
// message before it compares its size with the limit, so without a bound concurrent
// oversized requests grow the heap; at the bound gRPC resets streams (the client sees
// RESOURCE_EXHAUSTED). The process's RSS peaks at about twice this (the assembled
// message and its parse are not accounted): tls_test measures it.
constexpr size_t kGrpcMemoryBytes = size_t{128} << 20;

// The public port's security, read from the flags' files before anything starts.
struct PublicPortSecurity {
  std::shared_ptr<grpc::ServerCredentials> credentials;  // TLS, or plaintext
  std::optional<ApiKeys> api_keys;                       // none: Inference is open
};

absl::StatusOr<PublicPortSecurity> ReadPublicPortSecurity(const ServerConfig& config) {
  PublicPortSecurity security;
  if (config.tls_cert_file.empty()) {
    security.credentials = grpc::InsecureServerCredentials();
  } else {
    const bool mutual = !config.tls_client_ca_file.empty();
    grpc::SslServerCredentialsOptions options(
        mutual ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
               : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    TPSERVE_ASSIGN_OR_RETURN(TlsIdentity identity,
                             ReadTlsIdentity("tls-cert-file", config.tls_cert_file,
                                             "tls-key-file", config.tls_key_file));
    options.pem_key_cert_pairs.push_back({identity.private_key, identity.cert_chain});
    if (mutual) {
      TPSERVE_ASSIGN_OR_RETURN(options.pem_root_certs,
                               ReadPemCertificates("tls-client-ca-file", config.tls_client_ca_file));
    }
    security.credentials = grpc::SslServerCredentials(options);
  }
  if (!config.api_key_file.empty()) {
    TPSERVE_ASSIGN_OR_RETURN(security.api_keys, ApiKeys::Load("api-key-file", config.api_key_file));
  }
  return security;
}

std::unique_ptr<grpc::Server> StartGrpc(const ServerConfig& config,
                                        std::shared_ptr<grpc::ServerCredentials> credentials,
                                        grpc::Service* inference, std::string* address) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // Reflection describes services from the generated descriptor pool, and gRPC's
  // built-in health service has no generated code: this reference links
  // grpc.health.v1's, so that reflection can describe the Health service it lists.
  grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::StrCat(config.host, ":", config.port), std::move(credentials),
                           &port);
  // With SO_REUSEPORT gRPC clones the listening socket for each further completion queue
  // it polls, binding each clone to the address as given: under --port 0 a clone got a
  // port of its own, unannounced, that served everything. Off, the port is one socket,
  // and no other process can bind it beside this one.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  grpc::ResourceQuota quota("tpserve public port");
  quota.Resize(kGrpcMemoryBytes);
  builder.SetResourceQuota(quota);
  builder.RegisterService(inference);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server != nullptr) {
    *address = absl::StrCat(config.host, ":", port);
    server->GetHealthCheckService()->SetServingStatus(false);
    spdlog::info("listening on {} (NOT_SERVING until the worker pool is ready)", *address);
  }
  return server;
}

// Prometheus's GET /metrics (text format 0.0.4) on --metrics-port; null when it is off.
absl::StatusOr<std::unique_ptr<HttpServer>> StartMetrics(const ServerConfig& config,
                                                         const ServingCore* core) {
  if (config.metrics_port < 0) return std::unique_ptr<HttpServer>();
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start(config.host, config.metrics_port, [core](absl::string_view path) {
        if (path != "/metrics") {
          return HttpResponse{404, "text/plain; charset=utf-8",
                              "not found: tpserve serves /metrics\n"};
        }
        return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8",
                            core->RenderMetrics()};
      });
  if (server.ok()) {
    spdlog::info("metrics on http://{}:{}/metrics", config.host, (*server)->port());
  }
  return server;
}

// The chat template: --chat-template's (an error there is fatal), else the model's own;
// a model without one (or with one this server cannot parse, said on stderr) serves
// completions only.
absl::StatusOr<std::unique_ptr<ChatTemplate>> LoadChatTemplate(const ServerConfig& config,
                                                               const Tokenizer* tokenizer) {
  if (tokenizer == nullptr) {
    if (!config.chat_template_file.empty()) {
      return absl::InvalidArgumentError(
          "--chat-template: the model directory has no tokenizer.json to tokenize chats with");
    }
    return std::unique_ptr<ChatTemplate>();
  }
  ChatSpecialTokens tokens{tokenizer->config().bos_token, tokenizer->config().eos_token};
  absl::StatusOr<std::unique_ptr<ChatTemplate>> loaded =
      ChatTemplate::Load(config.model_dir, config.chat_template_file, tokens);
  if (loaded.ok()) {
    spdlog::info("chat template from {}", (*loaded)->origin());
    return loaded;
  }
  if (!config.chat_template_file.empty()) return loaded.status();
  spdlog::warn("chat requests are refused: {}", loaded.status().ToString());
  return std::unique_ptr<ChatTemplate>();
}

// The OpenAI-compatible API on --http-port (null when it is off).
absl::StatusOr<std::unique_ptr<HttpServer>> StartOpenAi(const ServerConfig& config,
                                                        OpenAiApi* api) {
  if (config.http_port < 0) return std::unique_ptr<HttpServer>();
  HttpServerConfig http;
  http.host = config.http_host.empty() ? config.host : config.http_host;
  http.port = config.http_port;
  HttpRoutes routes;
  api->AddRoutes(routes);
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(http, std::move(routes));
  if (server.ok()) {
    spdlog::info("OpenAI-compatible API on http://{}:{}/v1", http.host, (*server)->port());
  }
  return server;
}

int Serve(const ServerConfig& config, PublicPortSecurity security, const sigset_t& signals) {
  absl::StatusOr<ServingSetup> setup = PrepareServing(config);
  if (!setup.ok()) {
    spdlog::error("{}", setup.status().ToString());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<ChatTemplate>> chat_template =
      LoadChatTemplate(config, setup->tokenizer.get());
  if (!chat_template.ok()) {
    spdlog::error("{}", chat_template.status().ToString());
    return 2;
  }
  ServingCore core(setup->model, setup->tokenizer.get());
  const ChatConfig chat{chat_template->get(), config.tool_call_parser, config.reasoning_parser,
                        nullptr};
  InferenceService service(&core, chat);
  const std::optional<ApiKeys> api_keys = security.api_keys;
  std::optional<AuthenticatedInference> authenticated;
  if (security.api_keys) authenticated.emplace(&service, *std::move(security.api_keys));
  OpenAiApiOptions openai_options;
  openai_options.chat = chat;
  openai_options.api_keys = api_keys ? &*api_keys : nullptr;
  OpenAiApi openai(&core, openai_options);
  core.set_log_requests(!config.disable_log_requests);
  core.set_allow_reset_prefix_cache(config.allow_reset_prefix_cache);
  grpc::Service* inference = authenticated ? static_cast<grpc::Service*>(&*authenticated)
                                           : static_cast<grpc::Service*>(&service);
  std::string address;
  std::unique_ptr<grpc::Server> server =
      StartGrpc(config, std::move(security.credentials), inference, &address);
  if (server == nullptr) {
    spdlog::error("cannot listen on {}:{}", config.host, config.port);
    return 1;
  }
  // Scrapes go on through a drain, until Serve returns.
  absl::StatusOr<std::unique_ptr<HttpServer>> metrics = StartMetrics(config, &core);
  if (!metrics.ok()) {
    spdlog::error("--metrics-port: {}", metrics.status().ToString());
    return 1;
  }
  // Declared after `openai`, so it stops first (its connections' OnClose cancel their
  // generations) and the API outlives every handler.
  absl::StatusOr<std::unique_ptr<HttpServer>> http = StartOpenAi(config, &openai);
  if (!http.ok()) {
    spdlog::error("--http-port: {}", http.status().ToString());
    return 1;
  }
  // Shared with the signal thread, which may outlive this function.
  auto state = std::make_shared<ServingState>(&core, server.get(), address);
  PoolSupervisor supervisor(setup->supervisor, WorkerPoolFactory(setup->pool),
                            setup->tokenizer.get(),
                            [&state](std::shared_ptr<Engine> e) { state->OnEngine(std::move(e)); });
  absl::Status result;
  std::thread supervising([&] {
    result = supervisor.Run();
    state->Shutdown();
  });
  std::thread([signals, state] {
    int signal = 0;
    sigwait(&signals, &signal);
    spdlog::info("SIG{}: shutting down", sigabbrev_np(signal));
    state->Shutdown();
  }).detach();
  std::thread stats;
  if (config.log_stats_interval_s > 0) {
    stats = std::thread([&core, &state, interval = absl::Seconds(config.log_stats_interval_s)] {
      StatsLog log(absl::Now());
      while (!state->WaitForShutdownFor(interval)) {
        if (std::optional<std::string> line = log.Next(core.Totals(), core.Snapshot(), absl::Now())) {
          spdlog::info("{}", *line);
        }
      }
    });
  }
  state->WaitForShutdown();
  if (stats.joinable()) stats.join();
  state->BeginDrain();
  spdlog::info("draining: health NOT_SERVING, {} generations in flight get up to {} ms",
               core.generating(), config.drain_grace_ms);
  // In-flight Generate calls get the grace to finish (new ones are refused); those still
  // running then end with FINISH_REASON_CANCELLED and their usage, and gRPC has
  // kFlushMargin to deliver those last chunks before it cancels whatever is left. Other
  // calls (an open Health.Watch) never hold the exit: once no Generate runs, the server
  // shuts down at once.
  constexpr std::chrono::milliseconds kFlushMargin(2000);
  core.StopAccepting();
  const absl::Time grace_end = absl::Now() + absl::Milliseconds(config.drain_grace_ms);
  while (core.generating() > 0 && absl::Now() < grace_end) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const bool cancelled = core.generating() > 0;
  if (cancelled) {
    spdlog::warn("drain grace over: cancelling {} generations", core.generating());
    core.CancelInFlight();
  }
  // HTTP answers finish sending (new requests there get 503), then gRPC's. Without
  // cancelled calls, a short margin still lets finished calls send their status.
  if (*http) {
    (*http)->Shutdown(absl::Now() + (cancelled ? absl::FromChrono(kFlushMargin)
                                              : absl::Milliseconds(250)));
  }
  server->Shutdown(std::chrono::system_clock::now() +
                   (cancelled ? kFlushMargin : std::chrono::milliseconds(250)));
  supervisor.Stop();
  supervising.join();
  if (!result.ok()) {
    spdlog::error("{}", result.ToString());
    return 1;
  }
  spdlog::info("stopped");
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  const sigset_t signals = tpserve::BlockShutdownSignals();
  tpserve::RaiseDescriptorLimit();
  absl::StatusOr<std::optional<tpserve::ServerConfig>> flags =
      tpserve::ParseServerFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "tpserve: %s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  if (!flags->has_value()) return 0;  // --help or --version
  tpserve::ServerConfig* config = &**flags;
  if (absl::Status s = tpserve::InitLogging("tpserve", config->log_level); !s.ok()) {
    std::fprintf(stderr, "tpserve: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  spdlog::info("{} starting: model {}, --tp {}, --device {}", tpserve::VersionText("tpserve"),
               config->model_dir, config->tp, config->device);
  // --model: a directory, or a hub id in the local Hugging Face cache; the workers are
  // sent the directory.
  absl::StatusOr<tpserve::ModelPath> model =
      tpserve::ResolveModelPath(config->model_dir, [](const std::string& name) {
        const char* value = std::getenv(name.c_str());
        return value == nullptr ? std::nullopt : std::optional<std::string>(value);
      });
  if (!model.ok()) {
    spdlog::error("{}", model.status().ToString());
    return 1;
  }
  config->model_dir = model->dir;
  if (config->model_name.empty()) config->model_name = model->hub_id;
  absl::StatusOr<tpserve::PublicPortSecurity> security = tpserve::ReadPublicPortSecurity(*config);
  if (!security.ok()) {
    spdlog::error("{}", std::string(security.status().message()));
    return 2;
  }
  return tpserve::Serve(*config, *std::move(security), signals);
}
