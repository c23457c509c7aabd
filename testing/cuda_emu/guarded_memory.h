// Memory for the CUDA emulator (emu.h) whose bytes end where an inaccessible page
// begins, so that any access past the end faults at once. Below the start, poisoned slack
// runs down to a second inaccessible page; a write into the slack shows in SlackWritten().
// The CTAs' shared memory and every device allocation are one each. Not thread-safe.
#ifndef TPSERVE_TESTING_CUDA_EMU_GUARDED_MEMORY_H_
#define TPSERVE_TESTING_CUDA_EMU_GUARDED_MEMORY_H_

#include <cstddef>

namespace tpserve {
namespace emu {

inline constexpr unsigned char kPoison = 0xFF;  // NaN in fp32 and bf16

class GuardedMemory {
 public:
  // `bytes` rounded up to `alignment` (a power of two, at most a page), poisoned. Aborts
  // when the mapping fails.
  GuardedMemory(size_t bytes, size_t alignment);
  ~GuardedMemory();
  GuardedMemory(const GuardedMemory&) = delete;
  GuardedMemory& operator=(const GuardedMemory&) = delete;

  unsigned char* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  void Poison();
  // How far below data() the lowest write into the slack reached (0: none).
  size_t SlackWritten() const;

 private:
  void* map_;
  size_t map_bytes_;
  unsigned char* slack_;
  unsigned char* data_;
  size_t bytes_;
};

}  // namespace emu
}  // namespace tpserve

#endif  // TPSERVE_TESTING_CUDA_EMU_GUARDED_MEMORY_H_
