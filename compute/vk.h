#pragma once
// Internal: the one place compute/ includes Vulkan-Hpp, and the one path that
// turns a failed Vulkan call into a ComputeError.

#include <vulkan/vulkan_raii.hpp>

#include <string_view>

#include "compute/error.h"

namespace tensord::compute {

// Throws ComputeError (kOutOfMemory for the OOM results, else kDevice) naming `what`.
void checkVk(vk::Result result, std::string_view what);

// Runs `fn`, turning a vk::SystemError into ComputeError naming `what`.
template <typename Fn>
auto vkCall(std::string_view what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const vk::SystemError& e) {
    checkVk(vk::Result(e.code().value()), what);
    throw;  // unreachable: checkVk throws for every error result
  }
}

}  // namespace tensord::compute
