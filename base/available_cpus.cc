#include "base/available_cpus.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace tpserve {
namespace {

// The file's first line, or "" when it cannot be read.
std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::optional<int> Tighter(std::optional<int> a, std::optional<int> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

// This process's cgroup v2 path (the "0::" line of /proc/self/cgroup), or "".
std::string OwnCgroupV2Path() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

}  // namespace

std::optional<int> CpusFromQuota(const std::string& quota, const std::string& period) {
  char* end = nullptr;
  const double q = std::strtod(quota.c_str(), &end);
  if (end == quota.c_str() || *end != '\0' || !(q > 0)) return std::nullopt;  // max, -1, junk
  const double p = std::strtod(period.c_str(), &end);
  if (end == period.c_str() || *end != '\0' || !(p > 0)) return std::nullopt;
  const double cpus = std::ceil(q / p);
  return static_cast<int>(std::clamp(cpus, 1.0, 1e6));
}

std::optional<int> CgroupV2Cpus(const std::string& root, const std::string& cgroup_path) {
  std::optional<int> tightest;
  std::string path = cgroup_path.empty() ? "/" : cgroup_path;
  while (true) {
    std::istringstream fields(FirstLine(root + (path == "/" ? "" : path) + "/cpu.max"));
    std::string quota, period;
    if (fields >> quota >> period) tightest = Tighter(tightest, CpusFromQuota(quota, period));
    if (path == "/") break;
    const size_t slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
  return tightest;
}

int CpusPerRank(int64_t ranks) {
  return static_cast<int>(std::max<int64_t>(1, AvailableCpus() / std::max<int64_t>(ranks, 1)));
}

int AvailableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? std::max(CPU_COUNT(&set), 1) : 1;
  std::optional<int> quota = CgroupV2Cpus("/sys/fs/cgroup", OwnCgroupV2Path());
  for (const char* v1 : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
    const std::string dir(v1);
    quota = Tighter(quota, CpusFromQuota(FirstLine(dir + "/cpu.cfs_quota_us"),
                                         FirstLine(dir + "/cpu.cfs_period_us")));
  }
  if (quota) cpus = std::min(cpus, *quota);
  return std::max(cpus, 1);
}

}  // namespace tpserve
