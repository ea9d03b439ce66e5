#pragma once
// The device side of collectives: kernels that work on stretches of buffers
// at element offsets, so a collective can reduce one chunk of a tensor at a
// time and keep a bucket of several tensors in one f32 scratch buffer.
// They are OpSpecs for Engine::enqueueOp, kept out of the op table: no
// client calls them by name.
//
//   reduce:  inputs {src: f32}, outputs {dst: f32}
//            dst[dst_offset + i] = op(dst[dst_offset + i], src[src_offset + i])
//            for i < count; attr "op" is "sum", "max" or "min" (NaN wins,
//            as in PyTorch).
//   reduce_copy: inputs {src: f32}, outputs {dst: f32, copy: f32}
//            as reduce, and copy[dst_offset + i] = the new dst[dst_offset + i]:
//            one dispatch where a chunk that arrived in host memory is
//            reduced into device memory and its result goes back to host
//            memory to be sent on (kernels read and write host-visible
//            buffers through their device addresses).
//   convert: inputs {src: f32, f16 or bf16}, outputs {dst: f32, f16 or bf16}
//            dst[dst_offset + i] = src[src_offset + i] * scale, converted
//            to dst's dtype (bf16 rounds to nearest even).
//
// Offsets and counts are in elements of the operand they index.
//
// Threads: the specs are immutable; any thread may use them.

#include <cstdint>
#include <string>

#include "compute/attrs.h"
#include "compute/op_spec.h"

namespace tensord::compute {

const OpSpec& collectiveReduceSpec();
const OpSpec& collectiveReduceCopySpec();
const OpSpec& collectiveConvertSpec();

// The attributes of one reduce (`op` set) or convert (`op` empty) job.
Attrs collectiveKernelAttrs(uint64_t srcOffset, uint64_t dstOffset, uint64_t count, const std::string& op = "",
                            double scale = 1.0);

}  // namespace tensord::compute
