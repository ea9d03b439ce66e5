// libFuzzer target: the .npy reader tensorctl uses for uploads, fed arbitrary
// bytes as the file image. An NpyError is the expected answer to bad input;
// anything else escaping, a sanitizer report or a hang is a bug.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "client/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensord;
  try {
    npy::Array array = npy::parse(std::span(reinterpret_cast<const std::byte*>(data), size), "fuzz.npy");
    // A parsed array's data must be exactly what its shape and dtype say:
    // tensorctl uploads it under that descriptor.
    uint64_t numel = 1;
    for (int64_t d : array.shape) numel *= uint64_t(d);
    if (numel * dtypeSize(array.dtype) != array.data.size()) {
      std::fprintf(stderr, "npy::parse returned %zu data bytes for %llu elements\n", array.data.size(),
                   static_cast<unsigned long long>(numel));
      std::abort();
    }
  } catch (const npy::NpyError&) {
    // Rejected with a message: the expected outcome for most inputs.
  }
  return 0;
}
