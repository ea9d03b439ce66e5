#pragma once
// ParamArena: host-visible, host-coherent memory the device reads through
// buffer device addresses. Kernels get their shape/stride tables from it
// (Recorder::params) and report bad input into it (Recorder::errorSlot).
// Bump allocation in 1 MiB chunks; reset() once the batch using it finished.
//
// One per CommandStream frame; used by one thread at a time (the submit
// thread while recording, the completion thread's callbacks after).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "compute/vk.h"

namespace tensord::compute {

class Device;

class ParamArena {
 public:
  explicit ParamArena(const Device& device);
  ~ParamArena();

  struct Allocation {
    std::byte* host;
    uint64_t address;
  };
  // `bytes` of zeroed memory, 16-byte aligned.
  Allocation allocate(uint64_t bytes);
  Allocation copy(std::span<const std::byte> bytes);
  void reset();  // every allocation handed out so far becomes invalid

 private:
  struct Chunk;
  Chunk& newChunk(uint64_t bytes);

  const Device& device_;
  std::vector<std::unique_ptr<Chunk>> chunks_;
  size_t current_ = 0;   // chunk being filled
  uint64_t offset_ = 0;  // next free byte in it
};

}  // namespace tensord::compute
