// Hopper's bulk copies (cp.async.bulk: the TMA's one-dimensional form, and its tensor-map boxes)
// from global into shared memory, completed on shared-memory mbarriers: one instruction moves a
// whole range or tile, so a block can have tens of kilobytes in flight without holding them in
// registers. sm_90 only: on older devices these are never called (the caller's predicate picks
// another kernel) and compile to nothing.
#pragma once

#include <cstdint>

#include "kernels/tensor_core.cuh"  // shared_address

namespace ssdq::kernels {

// One thread: an mbarrier whose phase completes after `arrivals` arrivals (and the bytes announced).
__device__ inline void mbarrier_init(uint64_t* barrier, unsigned arrivals) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)), "r"(arrivals) : "memory");
#endif
}

// Makes the barriers this thread initialized visible to the async proxy (the TMA) and the block.
__device__ inline void mbarrier_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// One thread: an mbarrier whose phase completes after one arrival and the bytes it was told of.
__device__ inline void bulk_barrier_init(uint64_t* barrier) {
  mbarrier_init(barrier, 1);
  mbarrier_init_fence();
}

// One plain arrival (release semantics: this thread's earlier shared-memory reads are done).
__device__ inline void mbarrier_arrive(uint64_t* barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(barrier)) : "memory");
#endif
}

// An arrival on `barrier` once every cp.async this thread issued before has landed (counted
// among the barrier's initial arrivals).
__device__ inline void cp_async_arrive(uint64_t* barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(shared_address(barrier)) : "memory");
#endif
}

// A 2-D box of a tensor map (the TMA) into shared memory at `shared_dst` (1024-byte aligned for the
// 128-byte swizzle), counted on `barrier`; `map` is the generic address of a __grid_constant__
// CUtensorMap parameter, c0 the inner coordinate.
__device__ inline void tma_load_2d(void* shared_dst, const void* map, int c0, int c1, uint64_t* barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          shared_address(shared_dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(shared_address(barrier))
      : "memory");
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
