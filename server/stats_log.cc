#include "server/stats_log.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace tpserve {

std::optional<std::string> StatsLog::Next(const RequestTotals& totals,
                                          const ServingSnapshot& snapshot, absl::Time now) {
  const double seconds = std::max(absl::ToDoubleSeconds(now - last_time_), 1e-9);
  const uint64_t prompt = totals.prompt_tokens - last_totals_.prompt_tokens;
  const uint64_t generated = totals.generation_tokens - last_totals_.generation_tokens;
  const uint64_t calls = totals.calls - last_totals_.calls;
  const uint64_t queried = snapshot.prefix_cache_queried_tokens - last_queried_;
  const uint64_t hits = snapshot.prefix_cache_hit_tokens - last_hits_;
  const bool idle = prompt == 0 && generated == 0 && calls == 0 && snapshot.running == 0 &&
                    snapshot.waiting == 0;
  const bool quiet = idle && last_idle_;
  last_time_ = now;
  last_totals_ = totals;
  last_queried_ = snapshot.prefix_cache_queried_tokens;
  last_hits_ = snapshot.prefix_cache_hit_tokens;
  last_idle_ = idle;
  if (quiet) return std::nullopt;
  const double kv = snapshot.kv_blocks_total > 0
                        ? 100.0 * snapshot.kv_blocks_in_use / snapshot.kv_blocks_total
                        : 0.0;
  const double hit_rate = queried > 0 ? 100.0 * static_cast<double>(hits) / queried : 0.0;
  return absl::StrFormat(
      "stats: prompt %.1f tok/s, generation %.1f tok/s, running %d, waiting %d, KV cache "
      "%.1f%% (%d/%d blocks), prefix cache hits %.1f%%, finished %d calls%s",
      prompt / seconds, generated / seconds, snapshot.running, snapshot.waiting, kv,
      snapshot.kv_blocks_in_use, snapshot.kv_blocks_total, hit_rate, calls,
      snapshot.serving ? "" : " (not serving)");
}

}  // namespace tpserve
