#include "base/available_cpus.h"

#include <sched.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

// The affinity mask, not the machine: narrowed to one CPU, the count is 1; restored, it
// is at most the mask's size again (a cgroup quota may bound it further).
TEST(AvailableCpusTest, FollowsTheAffinityMask) {
  cpu_set_t original;
  ASSERT_EQ(sched_getaffinity(0, sizeof(original), &original), 0);
  EXPECT_LE(AvailableCpus(), CPU_COUNT(&original));
  EXPECT_GE(AvailableCpus(), 1);
  int first = 0;
  while (!CPU_ISSET(first, &original)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(AvailableCpus(), 1);
  EXPECT_EQ(CpusPerRank(4), 1);  // never below one each
  ASSERT_EQ(sched_setaffinity(0, sizeof(original), &original), 0);
}

TEST(AvailableCpusTest, QuotasRoundUpAndNoLimitIsNone) {
  EXPECT_EQ(CpusFromQuota("300000", "100000"), 3);
  EXPECT_EQ(CpusFromQuota("250000", "100000"), 3);  // 2.5 CPUs: 3 threads share them
  EXPECT_EQ(CpusFromQuota("50000", "100000"), 1);
  EXPECT_EQ(CpusFromQuota("max", "100000"), std::nullopt);
  EXPECT_EQ(CpusFromQuota("-1", "100000"), std::nullopt);  // cgroup v1's "none"
  EXPECT_EQ(CpusFromQuota("", ""), std::nullopt);
  EXPECT_EQ(CpusFromQuota("100000", "0"), std::nullopt);
  EXPECT_EQ(CpusFromQuota("12x", "100000"), std::nullopt);
}

// A pod's limit sits on an ancestor of the process's own cgroup (kubepods/.../pod/ctr):
// the tightest quota along the path counts.
TEST(AvailableCpusTest, TheTightestQuotaAlongTheCgroupPathCounts) {
  const std::string root = std::string(getenv("TEST_TMPDIR")) + "/cgroup";
  std::filesystem::create_directories(root + "/kubepods/pod1/ctr");
  auto write = [&](const std::string& dir, const std::string& text) {
    std::ofstream(root + dir + "/cpu.max") << text << "\n";
  };
  write("", "max 100000");
  write("/kubepods", "max 100000");
  write("/kubepods/pod1", "400000 100000");
  write("/kubepods/pod1/ctr", "max 100000");
  EXPECT_EQ(CgroupV2Cpus(root, "/kubepods/pod1/ctr"), 4);
  write("/kubepods/pod1/ctr", "150000 100000");
  EXPECT_EQ(CgroupV2Cpus(root, "/kubepods/pod1/ctr"), 2);
  EXPECT_EQ(CgroupV2Cpus(root, "/kubepods"), std::nullopt);
  EXPECT_EQ(CgroupV2Cpus(root, "/elsewhere"), std::nullopt);  // no files: no limit
  write("", "200000 100000");  // a container's namespaced root ("0::/")
  EXPECT_EQ(CgroupV2Cpus(root, "/"), 2);
}

}  // namespace
}  // namespace tpserve
