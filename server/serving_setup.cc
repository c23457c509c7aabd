#include "server/serving_setup.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <memory>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/available_cpus.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"
#include "tpserve/v1/batch_limits.h"
#include "worker/loader/hf_config.h"

namespace tpserve {
namespace {

namespace fs = std::filesystem;

constexpr char kOwnerFile[] = "owner.pid";

// Removes the tpserve-* folders under `base` that this user's earlier servers left when
// they died without cleaning up: those whose owner.pid names a process that is gone.
void RemoveStaleControlFolders(const fs::path& base) {
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(base, error)) {
    const std::string name = entry.path().filename().string();
    struct stat info;
    if (name.rfind("tpserve-", 0) != 0 || lstat(entry.path().c_str(), &info) != 0 ||
        !S_ISDIR(info.st_mode) || info.st_uid != geteuid()) {
      continue;
    }
    std::ifstream owner(entry.path() / kOwnerFile);
    long pid = 0;
    if (!(owner >> pid) || pid <= 0) continue;  // not one of ours, or still being made
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive
    fs::remove_all(entry.path(), error);
  }
}

// A fresh private folder for the workers' control socket, removed with the returned
// owner (at exit, or when the start fails); owner.pid inside lets a later server
// remove it if this one dies first.
absl::StatusOr<std::string> DefaultControlAddress(std::shared_ptr<const std::string>* owner) {
  std::error_code error;
  const fs::path base = fs::temp_directory_path(error);
  if (error) return absl::InternalError(absl::StrCat("no temporary folder: ", error.message()));
  RemoveStaleControlFolders(base);
  std::string pattern = (base / "tpserve-XXXXXX").string();
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create a folder like ", pattern));
  }
  const std::string dir = buffer.data();
  *owner = std::shared_ptr<const std::string>(new std::string(dir), [](const std::string* d) {
    std::error_code ignored;
    fs::remove_all(*d, ignored);
    delete d;
  });
  std::ofstream(fs::path(dir) / kOwnerFile) << getpid() << "\n";
  return absl::StrCat("unix:", dir, "/control.sock");
}

// WorkerPool as the supervisor sees it.
class SupervisedWorkerPool final : public SupervisedPool {
 public:
  explicit SupervisedWorkerPool(std::unique_ptr<WorkerPool> pool) : pool_(std::move(pool)) {}
  absl::StatusOr<worker::v1::StepResult> RunStep(const worker::v1::StepPlan& plan) override {
    return pool_->RunStep(plan);
  }
  int num_kv_blocks() const override { return pool_->num_kv_blocks(); }
  int kv_block_size() const override { return pool_->kv_block_size(); }
  bool healthy() const override { return pool_->healthy(); }
  void Shutdown(const std::string& reason) override { pool_->Shutdown(reason); }

 private:
  std::unique_ptr<WorkerPool> pool_;
};

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model_dir,
                                                       int vocab_size) {
  if (!fs::exists(fs::path(model_dir) / "tokenizer.json")) {
    spdlog::warn(
        "{} has no tokenizer.json; serving token ids only (text prompts get "
        "FAILED_PRECONDITION)",
        model_dir);
    return std::unique_ptr<Tokenizer>();
  }
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::FromPath(model_dir));
  // An id past the embedding rows would be tokenized, then refused by every request (or,
  // as an eos id, never produced).
  if (tokenizer->id_bound() > vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        model_dir, "/tokenizer.json has token ids up to ", tokenizer->id_bound() - 1,
        " (vocabulary and added tokens), past vocab_size ", vocab_size, " of ", model_dir,
        "/config.json"));
  }
  return tokenizer;
}

std::string ModelName(const ServerConfig& config) {
  if (!config.model_name.empty()) return config.model_name;
  fs::path path = fs::path(config.model_dir);
  if (!path.has_filename()) path = path.parent_path();
  return path.filename().string();
}

// What --dtype auto follows: config.json's dtype, else (a config without one) the
// embedding's dtype in the checkpoint, as transformers' dtype="auto" falls back to the
// weights'. Only the headers are read.
absl::StatusOr<std::string> ServedDType(const ServerConfig& config, const ModelConfig& model) {
  if (config.dtype != "auto" || config.device != "cpu" || model.torch_dtype_given ||
      config.quantization == "int8") {
    return config.ComputeDType(model.torch_dtype);
  }
  TPSERVE_ASSIGN_OR_RETURN(const DType weights, CheckpointDType(model, config.model_dir));
  return config.ComputeDType(weights);
}

ServedModel Describe(const ServerConfig& config, const ModelConfig& model,
                     const BatchLimits& limits, const std::string& dtype) {
  ServedModel served;
  served.architecture = model.architecture;
  served.model_path = config.model_dir;
  served.model_name = ModelName(config);
  served.vocab_size = model.vocab_size;
  served.tp = config.tp;
  served.dtype = dtype;
  served.quantization = config.quantization;
  served.device = config.device;
  served.kv_block_size = config.kv_block_size;
  served.limits = limits;
  served.max_queue = config.max_queue;
  return served;
}

absl::StatusOr<WorkerPoolOptions> PoolOptions(const ServerConfig& config,
                                               const BatchLimits& limits, const std::string& dtype,
                                               std::shared_ptr<const std::string>* control_dir) {
  WorkerPoolOptions pool;
  pool.model_dir = config.model_dir;
  pool.tp = config.tp;
  pool.device = config.device;
  pool.dtype = dtype;
  pool.quantization = config.quantization == "none" ? "" : config.quantization;
  pool.eager_decode = config.enforce_eager;
  pool.spawn_workers = !config.external_workers;
  pool.worker_binary = config.worker_binary;
  pool.worker_log_level = config.log_level;
  pool.worker_threads = config.cpu_threads_per_rank > 0 ? config.cpu_threads_per_rank
                        : config.device == "cpu"       ? CpusPerRank(config.tp)
                                                       : 1;
  if (config.device == "cpu" && !config.external_workers &&
      int64_t{pool.worker_threads} * config.tp > AvailableCpus()) {
    spdlog::warn("--cpu-threads-per-rank {} × --tp {} exceeds the {} CPUs tpserve may run on: "
                 "the ranks' threads will take turns on them",
                 pool.worker_threads, config.tp, AvailableCpus());
  }
  if (pool.spawn_workers && pool.worker_binary.empty()) {
    TPSERVE_ASSIGN_OR_RETURN(pool.worker_binary, DefaultWorkerBinary(config.device));
  }
  pool.control_address = config.control_address;
  pool.worker_token_file = config.worker_token_file;
  pool.advertise_host = config.advertise_address;
  if (pool.control_address.empty()) {
    TPSERVE_ASSIGN_OR_RETURN(pool.control_address, DefaultControlAddress(control_dir));
  }
  pool.kv_block_size = config.kv_block_size;
  pool.kv_num_blocks = config.kv_blocks;
  pool.kv_cache_dtype = config.kv_cache_dtype == "auto" ? dtype : config.kv_cache_dtype;
  if (config.kv_memory_mb > 0) {
    pool.kv_memory_bytes = config.kv_memory_mb << 20;
  } else if (config.device == "cuda" && config.kv_blocks == 0) {
    pool.kv_memory_bytes = 0;  // each GPU rank sizes its cache from the fraction
    pool.kv_memory_fraction = config.gpu_memory_fraction;
  }
  pool.limits = limits;
  pool.start_timeout = absl::Seconds(config.start_timeout_s);
  pool.step_timeout = absl::Milliseconds(config.step_timeout_ms);
  pool.step_timeout_per_token = absl::Milliseconds(config.step_timeout_per_token_ms);
  TPSERVE_RETURN_IF_ERROR(pool.Validate());
  return pool;
}

}  // namespace

PoolFactory WorkerPoolFactory(WorkerPoolOptions options) {
  return [options](int generation,
                   std::function<void()> lost) -> absl::StatusOr<std::unique_ptr<SupervisedPool>> {
    WorkerPoolOptions with_generation = options;
    with_generation.generation = generation;
    with_generation.on_failure = [lost = std::move(lost)](const absl::Status&) { lost(); };
    TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<WorkerPool> pool,
                             WorkerPool::Start(with_generation));
    return std::unique_ptr<SupervisedPool>(new SupervisedWorkerPool(std::move(pool)));
  };
}

std::string WorkerBinaryName(const std::string& device) {
  return device == "cuda" ? "tpserve_worker_cuda" : "tpserve_worker";
}

absl::StatusOr<std::string> WorkerBinaryBeside(const std::string& self,
                                               const std::string& device) {
  const std::string name = WorkerBinaryName(device);
  const fs::path dir = fs::path(self).parent_path();
  const fs::path beside = dir / name;
  const fs::path built = dir / ".." / "worker" / "rank" / name;
  std::error_code error;
  for (const fs::path& worker : {beside, built}) {
    if (fs::is_regular_file(worker, error)) return fs::canonical(worker).string();
  }
  return absl::NotFoundError(absl::StrCat("no ", name, " at ", beside.string(), " or ",
                                          built.string(), "; build //worker/rank:", name,
                                          " or pass --worker-binary"));
}

absl::StatusOr<std::string> DefaultWorkerBinary(const std::string& device) {
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (error) return absl::InternalError(absl::StrCat("/proc/self/exe: ", error.message()));
  return WorkerBinaryBeside(self.string(), device);
}

absl::StatusOr<ServingSetup> PrepareServing(const ServerConfig& config) {
  TPSERVE_ASSIGN_OR_RETURN(const ModelConfig model,
                           LoadModelConfig((fs::path(config.model_dir) / "config.json").string()));
  TPSERVE_RETURN_IF_ERROR(model.ValidateTp(config.tp));
  if (config.limits.max_context() > model.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-context ", config.limits.max_context(),
        " exceeds the model's max_position_embeddings ", model.max_position_embeddings, " (",
        config.model_dir, "/config.json)"));
  }
  // From here on max_context is the served length, never 0.
  BatchLimits limits = config.limits;
  TPSERVE_ASSIGN_OR_RETURN(const int max_context,
                           ResolveMaxContext(limits, model.max_position_embeddings,
                                             absl::StrCat(config.model_dir, "/config.json")));
  limits.set_max_context(max_context);
  ServingSetup setup;
  TPSERVE_ASSIGN_OR_RETURN(setup.tokenizer, LoadTokenizer(config.model_dir, model.vocab_size));
  TPSERVE_ASSIGN_OR_RETURN(const std::string dtype, ServedDType(config, model));
  TPSERVE_ASSIGN_OR_RETURN(
      const GenerationConfig generation,
      LoadGenerationConfig((fs::path(config.model_dir) / "generation_config.json").string(),
                           model.vocab_size));
  setup.model = Describe(config, model, limits, dtype);
  setup.model.generation_max_new_tokens = generation.max_new_tokens;
  TPSERVE_ASSIGN_OR_RETURN(setup.pool, PoolOptions(config, limits, dtype, &setup.control_dir));
  EngineOptions& engine = setup.supervisor.engine;
  engine.limits = limits;
  engine.max_queue = config.max_queue;
  engine.prefix_caching = !config.no_prefix_caching;
  engine.staggered_admission = !config.no_staggered_admission;
  engine.step_time_target = absl::Milliseconds(config.step_time_target_ms);
  engine.vocab_size = model.vocab_size;
  // Hugging Face's generate stops at generation_config.json's eos ids; config.json's
  // count too (vLLM takes both), each once.
  for (const std::vector<int>* ids : {&model.eos_token_ids, &generation.eos_token_ids}) {
    for (int id : *ids) {
      if (std::find(engine.eos_token_ids.begin(), engine.eos_token_ids.end(), id) ==
          engine.eos_token_ids.end()) {
        engine.eos_token_ids.push_back(id);
      }
    }
  }
  TPSERVE_RETURN_IF_ERROR(engine.Validate());
  setup.supervisor.exit_on_pool_failure = config.exit_on_pool_failure;
  setup.supervisor.warmup_tokens = config.warmup_tokens;
  setup.supervisor.warmup_timeout = absl::Seconds(config.start_timeout_s);
  return setup;
}

}  // namespace tpserve
