// Where downloads land: appends split anywhere, even inside an element,
// come out as the same elements, directly or through a ReceiveWorker.

#include <gtest/gtest.h>
#include <kj/async-io.h>

#include <cstring>
#include <vector>

#include "client/receive_worker.h"

namespace tensord::detail {
namespace {

std::vector<float> someFloats(size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = float(i) * 0.5f - 3.25f;
  return v;
}

const std::byte* bytesOf(const std::vector<float>& v) { return reinterpret_cast<const std::byte*>(v.data()); }

TEST(VectorLanding, FloatsSplitInsideElementsComeOutWhole) {
  const auto source = someFloats(1000);
  std::vector<float> out;
  VectorLanding<float> landing(out);
  landing.reserve(source.size() * sizeof(float));
  size_t at = 0;
  for (size_t step : {1, 3, 2, 7, 4, 5, 9, 1, 1, 1, 1, 13, 6}) {  // splits at every offset inside a float
    landing.append(bytesOf(source) + at, step);
    at += step;
  }
  landing.append(bytesOf(source) + at, source.size() * sizeof(float) - at);
  EXPECT_EQ(out, source);
}

TEST(VectorLanding, BytesAppendInOrder) {
  std::vector<std::byte> out;
  VectorLanding<std::byte> landing(out);
  const std::byte a[] = {std::byte{1}, std::byte{2}, std::byte{3}};
  landing.append(a, 3);
  landing.append(a, 0);
  landing.append(a + 1, 2);
  EXPECT_EQ(out, (std::vector<std::byte>{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{2}, std::byte{3}}));
}

TEST(VectorLanding, LargeFloatVectorThroughTheWorker) {
  auto io = kj::setupAsyncIo();
  const auto source = someFloats((size_t(6) << 20) / sizeof(float) + 3);  // past 2 MiB huge pages, odd tail
  std::vector<float> out;
  VectorLanding<float> landing(out);
  landing.reserve(source.size() * sizeof(float));
  {
    ReceiveWorker worker(landing);
    const size_t total = source.size() * sizeof(float);
    const size_t chunk = (size_t(1) << 20) + 2;  // chunks end inside floats
    for (size_t at = 0; at < total; at += chunk) {
      const size_t n = std::min(chunk, total - at);
      worker.append(kj::arrayPtr(reinterpret_cast<const kj::byte*>(bytesOf(source) + at), n)).wait(io.waitScope);
    }
    EXPECT_TRUE(worker.idle());
  }
  EXPECT_EQ(out, source);
}

}  // namespace
}  // namespace tensord::detail
