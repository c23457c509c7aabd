// The CPUs this process may use: its affinity mask (taskset, a container's cpuset),
// which std::thread::hardware_concurrency() does not read, bounded by its cgroup's CPU
// quota where one is set (a Kubernetes pod's CPU limit: cgroup v2's cpu.max along the
// process's cgroup path, or v1's cpu.cfs_quota_us), rounded up. At least 1.
#ifndef TPSERVE_BASE_AVAILABLE_CPUS_H_
#define TPSERVE_BASE_AVAILABLE_CPUS_H_

#include <cstdint>
#include <optional>
#include <string>

namespace tpserve {

int AvailableCpus();

// AvailableCpus() shared evenly between `ranks` processes (ranks ≥ 1), at least 1 each.
int CpusPerRank(int64_t ranks);

// The CPUs a quota of `quota` µs per `period` µs allows, rounded up (at least 1); nullopt
// for no limit (a quota of "max" or -1) or text that is not a quota.
std::optional<int> CpusFromQuota(const std::string& quota, const std::string& period);

// The tightest quota on the cgroup (v2) at `cgroup_path` (as /proc/self/cgroup's "0::"
// line gives it) and its ancestors, read under `root` (/sys/fs/cgroup); nullopt: none.
std::optional<int> CgroupV2Cpus(const std::string& root, const std::string& cgroup_path);

}  // namespace tpserve

#endif  // TPSERVE_BASE_AVAILABLE_CPUS_H_
