#pragma once
// A real Engine on the test machine's Vulkan device (lavapipe without a GPU;
// TENSORD_TEST_DEVICE picks another), plus blocking transfer helpers.

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "compute/engine.h"
#include "compute/op_table.h"

namespace tensord::compute::testing {

class EngineTest : public ::testing::Test {
 public:
  static void destroyEngine();  // after the last test (a global test environment)

 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  static Engine& engine() { return *engine_; }

  // Blocking helpers; they throw what the engine throws. `on`: another
  // engine than the suite's (one made with other options).
  static TensorView upload(const Shape& shape, const std::vector<float>& data, const std::string& owner = "test");
  static std::vector<float> download(const TensorView& tensor, Engine* on = nullptr);
  // Validates, allocates and runs `op`, waiting for completion.
  static std::vector<TensorView> run(const std::string& op, std::vector<TensorView> inputs,
                                     const std::vector<std::pair<std::string, AttrValue>>& attrs = {},
                                     Engine* on = nullptr);
  // Runs `spec` (in the table or not: a fused op) on `inputs` with outputs
  // as its template infers them, waiting for completion.
  static std::vector<TensorView> runSpec(const OpSpec& spec, std::vector<TensorView> inputs, const Attrs& attrs,
                                         Engine* on = nullptr);

  // A second engine on the same device whose memory is limited to
  // `limitBytes` (one small staging slot): for what runs where memory is
  // short. `name`: its logger's, unique in the process.
  static std::unique_ptr<Engine> limitedEngine(uint64_t limitBytes, const std::string& name);

  static std::vector<float> randomData(size_t n, float lo = -1.0f, float hi = 1.0f);
  // Any dtype, as raw little-endian bytes.
  static TensorView uploadBytes(const TensorDesc& desc, const std::vector<std::byte>& bytes,
                                const std::string& owner = "test");
  static std::vector<std::byte> downloadBytes(const TensorView& tensor, Engine* on = nullptr);

 public:
  static std::mt19937& rngForTests() { return rng(); }

 protected:

  static std::mt19937& rng();

 private:
  static std::unique_ptr<Engine> engine_;
};

}  // namespace tensord::compute::testing
