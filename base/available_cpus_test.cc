#include "base/available_cpus.h"

#include <sched.h>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

// The affinity mask, not the machine: narrowed to one CPU, the count is 1; restored, it
// is the mask's size again.
TEST(AvailableCpusTest, FollowsTheAffinityMask) {
  cpu_set_t original;
  ASSERT_EQ(sched_getaffinity(0, sizeof(original), &original), 0);
  EXPECT_EQ(AvailableCpus(), CPU_COUNT(&original));
  int first = 0;
  while (!CPU_ISSET(first, &original)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(AvailableCpus(), 1);
  ASSERT_EQ(sched_setaffinity(0, sizeof(original), &original), 0);
  EXPECT_EQ(AvailableCpus(), CPU_COUNT(&original));
}

}  // namespace
}  // namespace tpserve
