// Hopper's bulk copies (cp.async.bulk, the TMA's one-dimensional form) from global into shared
// memory, completed on a shared-memory mbarrier: one instruction moves a whole contiguous range, so
// a block can have tens of kilobytes in flight without holding them in registers. sm_90 only: on
// older devices these are never called (the caller's predicate picks another kernel) and compile to
// nothing.
#pragma once

#include <cstdint>

#include "kernels/tensor_core.cuh"  // shared_address

namespace ssdq::kernels {

// One thread: an mbarrier whose phase completes after one arrival and the bytes it was told of.
__device__ inline void bulk_barrier_init(uint64_t* barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(barrier)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// The arrival of the barrier's current phase, which then completes once `bytes` have landed.
__device__ inline void bulk_barrier_expect(uint64_t* barrier, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(barrier)), "r"(bytes)
               : "memory");
#endif
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory,
// counted on `barrier`.
__device__ inline void bulk_copy_to_shared(void* shared_dst, const void* global_src, unsigned bytes, uint64_t* barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   shared_address(shared_dst)),
               "l"(global_src), "r"(bytes), "r"(shared_address(barrier))
               : "memory");
#endif
}

// Waits until the barrier's phase of the given parity (its use count mod 2) has completed.
__device__ inline void bulk_barrier_wait(uint64_t* barrier, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned done = 0;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(shared_address(barrier)), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

}  // namespace ssdq::kernels
