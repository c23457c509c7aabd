#include "testing/cuda_emu/fiber.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define TPSERVE_EMU_ASAN 1
#endif

#if !defined(__x86_64__)
#error "the CUDA emulator's fiber switch is written for x86-64"
#endif

// Pushes the callee-saved registers and the SSE and x87 control words, stores the stack
// pointer in *save, loads `load` and pops what the other side pushed, returning into it.
extern "C" void TpserveEmuSwitchStacks(void** save, void* load);
asm(R"(
  .text
  .p2align 4
  .globl TpserveEmuSwitchStacks
  .hidden TpserveEmuSwitchStacks
  .type TpserveEmuSwitchStacks, @function
TpserveEmuSwitchStacks:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size TpserveEmuSwitchStacks, .-TpserveEmuSwitchStacks
)");

namespace tpserve {
namespace emu {
namespace {

thread_local Fiber* entering = nullptr;  // the fiber a switch is entering, for Start

[[noreturn]] void Die(const char* what) {
  std::perror(what);
  std::abort();
}

}  // namespace

Fiber::Fiber() {
  pthread_attr_t attr;
  void* bottom = nullptr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) Die("emu: pthread_getattr_np");
  pthread_attr_getstack(&attr, &bottom, &stack_bytes_);
  pthread_attr_destroy(&attr);
  stack_bottom_ = bottom;
}

Fiber::Fiber(size_t stack_bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  stack_bytes_ = (stack_bytes + page - 1) / page * page;
  map_bytes_ = page + stack_bytes_;
  map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) Die("emu: mmap of a fiber stack");
  if (mprotect(map_, page, PROT_NONE) != 0) Die("emu: mprotect of a stack guard");
  stack_bottom_ = static_cast<char*>(map_) + page;
}

Fiber::~Fiber() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

void Fiber::Reset(void (*entry)()) {
  entry_ = entry;
#if defined(TPSERVE_EMU_ASAN)
  // The last run left its frames' redzones poisoned: it exited without unwinding.
  ASAN_UNPOISON_MEMORY_REGION(stack_bottom_, stack_bytes_);
#endif
  // The frame TpserveEmuSwitchStacks pops, lowest address first: control words, r15, r14,
  // r13, r12, rbx, rbp, then Start as the return address, above it an empty slot where a
  // caller's return address would be (the ABI's stack alignment at a function's entry).
  void** sp = reinterpret_cast<void**>(static_cast<char*>(map_) + map_bytes_);
  *--sp = nullptr;
  *--sp = reinterpret_cast<void*>(&Fiber::Start);
  for (int i = 0; i < 6; ++i) *--sp = nullptr;
  uint32_t control[2] = {0, 0};
  asm volatile("stmxcsr %0" : "=m"(control[0]));
  asm volatile("fnstcw %0" : "=m"(control[1]));
  --sp;
  static_assert(sizeof(control) == sizeof(*sp));
  __builtin_memcpy(sp, control, sizeof(control));
  sp_ = sp;
}

void Fiber::Start() {
#if defined(TPSERVE_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  entering->entry_();
  std::fputs("emu: a fiber's entry returned\n", stderr);
  std::abort();
}

void Fiber::Switch(Fiber& from, Fiber& to) {
#if defined(TPSERVE_EMU_ASAN)
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, to.stack_bottom_, to.stack_bytes_);
#endif
  entering = &to;
  TpserveEmuSwitchStacks(&from.sp_, to.sp_);
#if defined(TPSERVE_EMU_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
}

void Fiber::Exit(Fiber& from, Fiber& to) {
#if defined(TPSERVE_EMU_ASAN)
  __sanitizer_start_switch_fiber(nullptr, to.stack_bottom_, to.stack_bytes_);
#endif
  entering = &to;
  TpserveEmuSwitchStacks(&from.sp_, to.sp_);
}

}  // namespace emu
}  // namespace tpserve
