// Stackful fibers for the CUDA emulator (emu.h): every emulated CUDA thread runs on a
// stack of its own and hands control back to its CTA's scheduler (cta.cc) whenever it
// waits at a barrier. A switch saves the System V x86-64 callee-saved registers, so it
// costs a few nanoseconds where an OS-thread handoff costs microseconds.
//
// Threading: a fiber is created, entered and left on one OS thread. Under AddressSanitizer
// every switch is announced to it, so ASan builds work; ThreadSanitizer is not supported.
#ifndef TPSERVE_TESTING_CUDA_EMU_FIBER_H_
#define TPSERVE_TESTING_CUDA_EMU_FIBER_H_

#include <cstddef>

namespace tpserve {
namespace emu {

class Fiber {
 public:
  // The calling OS thread's own stack: what the scheduler runs on.
  Fiber();
  // A fresh stack of `stack_bytes` (rounded to pages) above an inaccessible guard page,
  // so an overflow faults.
  explicit Fiber(size_t stack_bytes);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // The next switch to this fiber calls entry() at the top of its stack. entry must never
  // return: it ends by switching away for good (Exit).
  void Reset(void (*entry)());

  // Saves the running context in `from` (the fiber running now) and continues `to`.
  static void Switch(Fiber& from, Fiber& to);
  // Like Switch, for a `from` that will only run again after a Reset.
  static void Exit(Fiber& from, Fiber& to);

 private:
  static void Start();  // first frame of every fiber: calls the Reset entry

  void* sp_ = nullptr;  // saved stack pointer while not running
  void* map_ = nullptr;  // guard page + stack (null for an OS thread's own stack)
  size_t map_bytes_ = 0;
  const void* stack_bottom_ = nullptr;  // usable stack, for AddressSanitizer
  size_t stack_bytes_ = 0;
  void (*entry_)() = nullptr;
};

}  // namespace emu
}  // namespace tpserve

#endif  // TPSERVE_TESTING_CUDA_EMU_FIBER_H_
