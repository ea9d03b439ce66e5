#include "compute/param_arena.h"

#include <cstring>

#include "compute/device.h"

namespace tensord::compute {

namespace {
constexpr uint64_t kChunkBytes = 1u << 20;
constexpr uint64_t kAlign = 16;
}  // namespace

struct ParamArena::Chunk {
  vk::raii::Buffer buffer;
  vk::raii::DeviceMemory memory;
  uint64_t size;
  uint64_t address;
  std::byte* host;
};

ParamArena::ParamArena(const Device& device) : device_(device) { newChunk(kChunkBytes); }

ParamArena::~ParamArena() = default;

ParamArena::Chunk& ParamArena::newChunk(uint64_t bytes) {
  const auto& dev = device_.device();
  vk::raii::Buffer buffer = vkCall("vkCreateBuffer", [&] {
    return vk::raii::Buffer(dev, {.size = bytes,
                                  .usage = vk::BufferUsageFlagBits::eStorageBuffer |
                                           vk::BufferUsageFlagBits::eShaderDeviceAddress});
  });
  auto req = buffer.getMemoryRequirements();
  uint32_t type = device_.memoryType(req.memoryTypeBits,
                                     vk::MemoryPropertyFlagBits::eHostVisible | vk::MemoryPropertyFlagBits::eHostCoherent,
                                     vk::MemoryPropertyFlagBits::eDeviceLocal);
  vk::MemoryAllocateFlagsInfo flags{.flags = vk::MemoryAllocateFlagBits::eDeviceAddress};
  vk::raii::DeviceMemory memory = vkCall("vkAllocateMemory", [&] {
    return vk::raii::DeviceMemory(dev, {.pNext = &flags, .allocationSize = req.size, .memoryTypeIndex = type});
  });
  buffer.bindMemory(*memory, 0);
  uint64_t address = dev.getBufferAddress({.buffer = *buffer});
  auto* host = static_cast<std::byte*>(memory.mapMemory(0, bytes));
  chunks_.push_back(std::make_unique<Chunk>(Chunk{std::move(buffer), std::move(memory), bytes, address, host}));
  return *chunks_.back();
}

ParamArena::Allocation ParamArena::allocate(uint64_t bytes) {
  bytes = (std::max<uint64_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  while (current_ < chunks_.size() && offset_ + bytes > chunks_[current_]->size) {
    ++current_;
    offset_ = 0;
  }
  if (current_ == chunks_.size()) newChunk(std::max(bytes, kChunkBytes));
  Chunk& chunk = *chunks_[current_];
  Allocation a{chunk.host + offset_, chunk.address + offset_};
  offset_ += bytes;
  std::memset(a.host, 0, bytes);
  return a;
}

ParamArena::Allocation ParamArena::copy(std::span<const std::byte> bytes) {
  Allocation a = allocate(bytes.size());
  if (!bytes.empty()) std::memcpy(a.host, bytes.data(), bytes.size());
  return a;
}

void ParamArena::reset() {
  current_ = 0;
  offset_ = 0;
}

}  // namespace tensord::compute
