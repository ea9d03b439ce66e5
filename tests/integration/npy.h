#pragma once
// Minimal .npy (format 1.0) reader/writer for little-endian f32 C-order arrays,
// written independently of tensorctl's so the tests check it against the format.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tensord::testing {

struct NpyF32 {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

void writeNpyF32(const std::filesystem::path& path, const std::vector<int64_t>& shape, const std::vector<float>& data);
// Throws std::runtime_error naming the problem for anything but '<f4' C-order.
NpyF32 readNpyF32(const std::filesystem::path& path);

}  // namespace tensord::testing
