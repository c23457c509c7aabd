// The CPUs this process may run on: its affinity mask (taskset, a container's cpuset),
// which std::thread::hardware_concurrency() does not read. At least 1.
#ifndef TPSERVE_BASE_AVAILABLE_CPUS_H_
#define TPSERVE_BASE_AVAILABLE_CPUS_H_

namespace tpserve {

int AvailableCpus();

}  // namespace tpserve

#endif  // TPSERVE_BASE_AVAILABLE_CPUS_H_
