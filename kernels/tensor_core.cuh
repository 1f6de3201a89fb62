// Warp-level tensor-core helpers (mma.sync, ldmatrix) and the cp.async copies that feed them
// (sm_80 and newer), shared by the SSD kernels.
#pragma once

#include <cstdint>

namespace ssdq::kernels {

#ifdef __CUDACC__
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* global_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global_src) : "memory");
}
// 16 bytes to a shared-memory address, of which the first `bytes` (16 or 0) are read and the rest
// zero-filled (with 0 the source is not touched).
__device__ __forceinline__ void cp_async_16_to(unsigned smem_address, const void* global_src, unsigned bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address), "l"(global_src), "r"(bytes) : "memory");
}
// cp_async_16 where `valid`, else 16 zero bytes written and nothing read (the source is not touched).
__device__ __forceinline__ void cp_async_16_or_zero(void* smem_dst, const void* global_src, bool valid) {
  cp_async_16_to(static_cast<unsigned>(__cvta_generic_to_shared(smem_dst)), global_src, valid ? 16 : 0);
}
// 4 bytes where `valid`, else 4 zero bytes (cp.async.ca: through L1, for scattered small reads).
__device__ __forceinline__ void cp_async_4_or_zero(void* smem_dst, const void* global_src, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(global_src), "r"(valid ? 4 : 0) : "memory");
}
// Waits until at most `kPending` committed groups of this thread's copies are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait_pending() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// Tensor-core fragments of mma.sync.m16n8k16 (16-bit elements in, fp32 accumulate), lane = 4·g + q:
//   A (16x16, 4 words): a0 = (row g, k 2q..2q+1), a1 = (g+8, 2q), a2 = (g, 2q+8), a3 = (g+8, 2q+8)
//   B (16x8, 2 words):  b0 = (k 2q..2q+1, col g), b1 = (k 2q+8.., col g)
//   C (16x8, 4 floats): c0, c1 = (row g, cols 2q, 2q+1), c2, c3 = (row g+8, same cols)
// ldmatrix.x4 loads four 8x8 matrices of 16-bit elements whose row addresses come from lanes 8j..8j+7 (16 bytes
// each, 32-bit shared addresses); without .trans lane l receives row l/4, elements 2(l%4), +1 of
// matrix j in word j, with .trans the transposed matrix.
__device__ __forceinline__ uint32_t shared_address(const void* smem_ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(smem_ptr));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
}
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// mma.sync.m16n8k32 with int8 operands and int32 accumulation (exact): the fragments are those of
// m16n8k16 with each 16-bit element read as two int8 of consecutive k (a0 = row g, k 4q..4q+3;
// a2 = row g, k 16 + 4q..; b0 = k 4q..4q+3, col g; b1 = k 16 + 4q..), so the ldmatrix offsets
// below serve both, counted in 16-bit elements (a 32-byte k block of int8 is 16 elements).
__device__ __forceinline__ void mma_s8_16832(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n" : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// The same with unsigned int8 A (bytes 0..255) against signed int8 B.
__device__ __forceinline__ void mma_u8s8_16832(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n" : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Offset (elements) of the row each lane addresses in ldmatrix_x4 for one 16x16 operand block at
// the origin of a row-major shared tile with row stride ld (rows of 16 bytes at 16-byte multiples).
// A, no .trans, tile [m][k]: matrices (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15).
__device__ __forceinline__ int a_lane_offset(int lane, int ld) { return (lane & 15) * ld + (lane >> 4) * 8; }
// A, .trans, tile [k][m] (the operand's transpose as stored): same four matrices.
__device__ __forceinline__ int at_lane_offset(int lane, int ld) {
  return ((lane & 7) + (lane >> 4) * 8) * ld + ((lane >> 3) & 1) * 8;
}
// B, .trans, tile [k][n]: words (b0, b1) of n tile 0, then (b0, b1) of n tile 1.
__device__ __forceinline__ int b_lane_offset(int lane, int ld) {
  return ((lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8;
}
// B, no .trans, tile [n][k] (k contiguous): words (b0, b1) of n tile 0, then of n tile 1.
__device__ __forceinline__ int bt_lane_offset(int lane, int ld) {
  return ((lane & 7) + (lane >> 4) * 8) * ld + ((lane >> 3) & 1) * 8;
}

#endif  // __CUDACC__

}  // namespace ssdq::kernels
