// One decode step of the middle of a Mamba-2 mixer in one launch: the causal conv1d + SiLU of the
// x|B|C channels (kernels/causal_conv1d.h, its fp32 path at seqlen 1, with the channels' formats)
// feeding the SSD state update (kernels/ssd_state_update.h at steps 1), the conv's outputs kept in
// shared memory instead of a round trip through global memory and a second launch.
// Each block of the state update's grid (head, sequence, slice of rows) convolves the x channels of
// its rows and the B and C channels of its head's group (every head of a group repeats those).
// The x channels' conv state is advanced by the one block that owns them; a group's B|C, which
// every block of the group reads, by the last of them to arrive, counted in
// arrivals[sequence · groups + group] (zero before the launch, zero again after it).
// The same bits as launch_causal_conv1d, then launch_ssd_state_update on its output.
// The SSM and conv states and the constants are read before the kernel waits for the previous grid
// (kernels/programmatic_launch.cuh): the launch just before this one must not write them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/causal_conv1d.h"
#include "kernels/ssd_state_update.h"

namespace ssdq::kernels {

struct SsdConvStepArgs {
  // seqlen 1, width 4, fp32 in and out (in_formats / out_formats as the conv takes them, no
  // in_scales); channels = heads·headdim + 2·groups·dstate in the order x|B|C; out and parts unused.
  CausalConv1dArgs conv;
  // steps 1, io_type kF32, batch = conv.batch; x, B and C unused (the conv's outputs).
  SsdStateUpdateArgs step;
  int32_t* arrivals = nullptr;  // [batch · groups], all zero
};

// Shapes handled: conv width 4, dstate 64, 128 or 256; otherwise run the two kernels.
bool ssd_conv_step_supported(const SsdConvStepArgs& args);
cudaError_t launch_ssd_conv_step(const SsdConvStepArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
