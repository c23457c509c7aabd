#include "server/stats_log.h"

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(StatsLogTest, RatesOverTheIntervalAndQuietWhenIdle) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  StatsLog log(t0);
  RequestTotals totals;
  ServingSnapshot s;
  s.serving = true;
  s.kv_blocks_total = 200;
  // Idle from the start: one line of zeros, then quiet.
  EXPECT_EQ(log.Next(totals, s, t0 + absl::Seconds(10)).value_or("none"),
            "stats: prompt 0.0 tok/s, generation 0.0 tok/s, running 0, waiting 0, KV cache "
            "0.0% (0/200 blocks), prefix cache hits 0.0%, finished 0 calls");
  EXPECT_FALSE(log.Next(totals, s, t0 + absl::Seconds(20)).has_value());
  // Work: 400 prompt and 50 generated tokens over 10 s, half the prompt from cache.
  totals.calls = 3;
  totals.prompt_tokens = 400;
  totals.generation_tokens = 50;
  s.running = 2;
  s.waiting = 1;
  s.kv_blocks_in_use = 50;
  s.prefix_cache_queried_tokens = 400;
  s.prefix_cache_hit_tokens = 200;
  EXPECT_EQ(log.Next(totals, s, t0 + absl::Seconds(30)).value_or("none"),
            "stats: prompt 40.0 tok/s, generation 5.0 tok/s, running 2, waiting 1, KV cache "
            "25.0% (50/200 blocks), prefix cache hits 50.0%, finished 3 calls");
  // The next interval counts only its own tokens.
  totals.generation_tokens = 70;
  s.running = 0;
  s.waiting = 0;
  s.kv_blocks_in_use = 0;
  EXPECT_EQ(log.Next(totals, s, t0 + absl::Seconds(35)).value_or("none"),
            "stats: prompt 0.0 tok/s, generation 4.0 tok/s, running 0, waiting 0, KV cache "
            "0.0% (0/200 blocks), prefix cache hits 0.0%, finished 0 calls");
  // Idle once logged, then quiet; not serving is said.
  s.serving = false;
  EXPECT_NE(log.Next(totals, s, t0 + absl::Seconds(45)).value_or("none").find("(not serving)"),
            std::string::npos);
  EXPECT_FALSE(log.Next(totals, s, t0 + absl::Seconds(55)).has_value());
}

}  // namespace
}  // namespace tpserve
