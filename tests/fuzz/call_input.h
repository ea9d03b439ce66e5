#pragma once
// The input format of fuzz_call, shared with call_seeds:
//
//   byte 0        L, the length of the descriptor bytes
//   bytes 1..L    descriptors of the call's input tensors, one after another:
//                 dtype (byte % 7, compute::DType order), rank (byte % 5),
//                 then one byte per dim (0..255); missing bytes read as 0
//   the rest      a Cap'n Proto message (segment table first, as
//                 capnp::messageToFlatArray writes it) whose root is the
//                 params of Session.call
//
// The inputs of a real call are capabilities to tensors the daemon holds, so
// their descriptors cannot come from the message; the fuzzer picks them here.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "compute/dtype.h"

namespace tensord::fuzz {

constexpr uint32_t kDTypeCount = 7;
constexpr uint32_t kMaxFuzzRank = 4;

// Descriptors for `count` inputs read from `bytes`.
inline std::vector<compute::TensorDesc> decodeDescs(std::span<const uint8_t> bytes, size_t count) {
  std::vector<compute::TensorDesc> descs(count);
  size_t pos = 0;
  auto next = [&]() -> uint8_t { return pos < bytes.size() ? bytes[pos++] : 0; };
  for (auto& desc : descs) {
    desc.dtype = static_cast<compute::DType>(next() % kDTypeCount);
    desc.shape.resize(next() % (kMaxFuzzRank + 1));
    for (int64_t& d : desc.shape) d = next();
  }
  return descs;
}

// The inverse, for seeds: appends `desc` (rank <= 4, dims <= 255).
inline void encodeDesc(std::vector<uint8_t>& out, const compute::TensorDesc& desc) {
  out.push_back(static_cast<uint8_t>(desc.dtype));
  out.push_back(static_cast<uint8_t>(desc.shape.size()));
  for (int64_t d : desc.shape) out.push_back(static_cast<uint8_t>(d));
}

}  // namespace tensord::fuzz
