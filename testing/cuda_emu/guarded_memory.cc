#include "testing/cuda_emu/guarded_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tpserve {
namespace emu {

GuardedMemory::GuardedMemory(size_t bytes, size_t alignment)
    : bytes_((bytes + alignment - 1) / alignment * alignment) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t span = (bytes_ + page - 1) / page * page;
  map_bytes_ = page + span + page;
  map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) {
    std::fprintf(stderr, "emu: mmap of %zu bytes failed\n", map_bytes_);
    std::abort();
  }
  slack_ = static_cast<unsigned char*>(map_) + page;
  if (mprotect(map_, page, PROT_NONE) != 0 || mprotect(slack_ + span, page, PROT_NONE) != 0) {
    std::perror("emu: mprotect of a guard page");
    std::abort();
  }
  data_ = slack_ + span - bytes_;
  std::memset(slack_, kPoison, span);
}

GuardedMemory::~GuardedMemory() { munmap(map_, map_bytes_); }

void GuardedMemory::Poison() { std::memset(data_, kPoison, bytes_); }

size_t GuardedMemory::SlackWritten() const {
  for (const unsigned char* p = slack_; p < data_; ++p) {
    if (*p != kPoison) return static_cast<size_t>(data_ - p);
  }
  return 0;
}

}  // namespace emu
}  // namespace tpserve
