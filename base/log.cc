#include "base/log.h"

#include <cstdio>
#include <memory>
#include <mutex>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "spdlog/sinks/base_sink.h"
#include "spdlog/spdlog.h"

namespace tpserve {
namespace {

// Below warning to stdout, warning and above to stderr; flushed per line.
class SplitSink : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    std::FILE* out = msg.level >= spdlog::level::warn ? stderr : stdout;
    std::fwrite(line.data(), 1, line.size(), out);
    std::fflush(out);
  }
  void flush_() override {
    std::fflush(stdout);
    std::fflush(stderr);
  }
};

absl::StatusOr<spdlog::level::level_enum> ParseLevel(const std::string& level) {
  if (level == "debug") return spdlog::level::debug;
  if (level == "info") return spdlog::level::info;
  if (level == "warning") return spdlog::level::warn;
  if (level == "error") return spdlog::level::err;
  return absl::InvalidArgumentError(
      absl::StrCat("--log-level must be ", kLogLevels, ", got \"", level, "\""));
}

// The line format, `name` taken literally.
std::string Pattern(const std::string& name) {
  return absl::StrCat("%Y-%m-%d %H:%M:%S.%e %l ", absl::StrReplaceAll(name, {{"%", "%%"}}),
                      ": %v");
}

}  // namespace

absl::Status ValidateLogLevel(const std::string& level) { return ParseLevel(level).status(); }

absl::Status InitLogging(const std::string& name, const std::string& level) {
  absl::StatusOr<spdlog::level::level_enum> parsed = ParseLevel(level);
  if (!parsed.ok()) return parsed.status();
  auto logger = std::make_shared<spdlog::logger>(name, std::make_shared<SplitSink>());
  logger->set_pattern(Pattern(name));
  logger->set_level(*parsed);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(std::move(logger));
  return absl::OkStatus();
}

void SetLogName(const std::string& name) {
  // The sinks swap their formatter under their own lock.
  spdlog::default_logger_raw()->set_pattern(Pattern(name));
}

}  // namespace tpserve
