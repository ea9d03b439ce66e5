// op_bench: times single ops on the compute engine (no RPC), so a kernel
// template's speed is measured on its own, and prints one JSON line per case.
// Each case gets three figures, per call:
//   - "seconds": the wall time of N identical ops enqueued back to back on
//     the engine and waited for once, divided by N (so the submit and fence
//     wait are amortized, as PyTorch's CUDA-event timing of back-to-back
//     launches amortizes its own): the median of 5 such trials, N at least
//     --repeats and enough for a trial to last --min-trial-ms (default 20);
//   - "device_seconds": the device's own time for the ops of one more such
//     trial, from Vulkan timestamps written around each job (where the
//     device has them; the timestamps cost the device a few microseconds per
//     job, so the other figures are taken without them);
//   - "client_seconds": the same calls made through the C++ client to a
//     daemon this program starts on 127.0.0.1:0 once the engine's figures
//     are taken and the engine is gone (--tensord PATH, default the one built
//     beside it; --no-client skips it), timed the same way: what a remote
//     caller's pipelined calls see.
// Each row also lists "kernels": the kernel variants the case's calls
// dispatched on the engine (Engine::kernelDispatches), the path behind its
// figures. The rows are printed once every case has its figures.
// bench/op_bench.py runs the same cases with PyTorch on the same GPU in the
// same run and prints the ratios.
//
// Chain cases (name ending in _chainN) run as a pipelined client's calls do:
// N calls back to back, each output a new tensor and the previous one
// dropped while its work is still queued (add adds the second input every
// call); several chains back to back, one wait at the end. They also print
// the device memory the chains reserved: peak_reserved_bytes over
// reserved_before_bytes. Their trials, too, last at least --min-trial-ms.
//
// Independent cases (name ending in _indepN) run N calls on N distinct sets
// of tensors, round after round, as an optimizer step over N parameters
// does: no call depends on another of its round, so they may run at the
// same time on the device. Per call, as above.
//
//   op_bench [--repeats N] [--min-trial-ms MS] [--filter SUBSTRING[,SUBSTRING...]]
//            [--matmul-f32 tensor_cores|fma] [--tensord PATH | --no-client]
// (a case runs when its name contains any of the substrings; --matmul-f32
// is the config key matmul_f32, for the engine's figures). The exit status
// is 1 when a case failed.

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <optional>
#include <vector>

#include "bench/op_bench_client.h"
#include "bench/stats.h"
#include "compute/engine.h"
#include "compute/op_table.h"

namespace tensord::bench {
namespace {

using namespace tensord::compute;
using Clock = std::chrono::steady_clock;

struct Case {
  std::string name;  // as in op_bench.py
  std::string op;
  std::vector<TensorDesc> inputs;
  std::vector<std::pair<std::string, AttrValue>> attrs;
  double bytes;  // bytes moved, for GB/s (0: use flops)
  double flops;
  int chain = 0;  // > 0: a pipelined chain of this many calls, new outputs each (see above)
  int independent = 0;  // > 0: this many calls on distinct tensors, back to back (see above)
  std::optional<double> fillFirst;  // every element of the first input (else randn, as every other input)
};

std::vector<Case> cases() {
  auto f32 = [](Shape s) { return TensorDesc{DType::F32, std::move(s)}; };
  auto f16 = [](Shape s) { return TensorDesc{DType::F16, std::move(s)}; };
  auto bf16 = [](Shape s) { return TensorDesc{DType::BF16, std::move(s)}; };
  const double n8k = 8192.0 * 8192.0;
  std::vector<Case> c = {
      {"add_f32_64MiB", "add", {f32({16 << 20}), f32({16 << 20})}, {}, 3 * 64.0 * (1 << 20), 0},
      {"relu_f32_64MiB", "relu", {f32({16 << 20})}, {}, 2 * 64.0 * (1 << 20), 0},
      {"mul_f32_64MiB", "mul", {f32({16 << 20}), f32({16 << 20})}, {}, 3 * 64.0 * (1 << 20), 0},
      {"gelu_f32_64MiB", "gelu", {f32({16 << 20})}, {}, 2 * 64.0 * (1 << 20), 0},
      {"relu_f32_1MiB_chain10", "relu", {f32({1 << 18})}, {}, 2 * 1.0 * (1 << 20), 0, 10},
      {"relu_f32_64MiB_chain10", "relu", {f32({16 << 20})}, {}, 2 * 64.0 * (1 << 20), 0, 10},
      {"relu_f32_1GiB_chain10", "relu", {f32({256 << 20})}, {}, 2 * 1024.0 * (1 << 20), 0, 10},
      {"add_f32_1GiB_chain10", "add", {f32({256 << 20}), f32({256 << 20})}, {}, 3 * 1024.0 * (1 << 20), 0, 10},
      {"exp_f16_32MiB", "exp", {f16({16 << 20})}, {}, 2 * 32.0 * (1 << 20), 0},
      {"sum_all_8192x8192", "sum", {f32({8192, 8192})}, {}, 4 * n8k, 0},
      {"sum_rows_8192x8192", "sum", {f32({8192, 8192})}, {{"dim", std::vector<int64_t>{1}}}, 4 * n8k, 0},
      {"sum_cols_8192x8192", "sum", {f32({8192, 8192})}, {{"dim", std::vector<int64_t>{0}}}, 4 * n8k, 0},
      {"sum_64x4M_rows", "sum", {f32({64, 1 << 22})}, {{"dim", std::vector<int64_t>{1}}}, 4 * 64.0 * (1 << 22), 0},
      {"amax_all_8192x8192", "amax", {f32({8192, 8192})}, {}, 4 * n8k, 0},
      // Each reduction path: workgroup rows, subgroup rows, split rows,
      // columns, whole tensor; other ops of the template on the same paths.
      {"mean_rows_8192x8192", "mean", {f32({8192, 8192})}, {{"dim", std::vector<int64_t>{1}}}, 4 * n8k, 0},
      {"mean_cols_8192x8192", "mean", {f32({8192, 8192})}, {{"dim", std::vector<int64_t>{0}}}, 4 * n8k, 0},
      {"mean_64x4M_rows", "mean", {f32({64, 1 << 22})}, {{"dim", std::vector<int64_t>{1}}}, 4 * 64.0 * (1 << 22), 0},
      {"amax_rows_8192x8192", "amax", {f32({8192, 8192})}, {{"dim", std::vector<int64_t>{1}}}, 4 * n8k, 0},
      {"amax_cols_8192x8192", "amax", {f32({8192, 8192})}, {{"dim", std::vector<int64_t>{0}}}, 4 * n8k, 0},
      {"sum_rows_131072x512", "sum", {f32({131072, 512})}, {{"dim", std::vector<int64_t>{1}}}, 4 * n8k, 0},
      {"sum_f16_all_8192x8192", "sum", {f16({8192, 8192})}, {}, 2 * n8k, 0},
      {"argmax_all_8192x8192", "argmax", {f32({8192, 8192})}, {}, 4 * n8k, 0},
      {"var_rows_8192x8192", "var", {f32({8192, 8192})}, {{"dim", std::vector<int64_t>{1}}}, 4 * n8k, 0},
      {"softmax_4096x4096", "softmax", {f32({4096, 4096})}, {{"dim", int64_t(-1)}}, 2 * 4 * 4096.0 * 4096, 0},
      {"layer_norm_8192x1024", "layer_norm", {f32({8192, 1024})}, {{"normalized_shape", std::vector<int64_t>{1024}}},
       2 * 4 * 8192.0 * 1024, 0},
      {"rms_norm_8192x1024", "rms_norm", {f32({8192, 1024})}, {{"normalized_shape", std::vector<int64_t>{1024}}},
       2 * 4 * 8192.0 * 1024, 0},
      {"matmul_f32_1024", "matmul", {f32({1024, 1024}), f32({1024, 1024})}, {}, 0, 2 * 1024.0 * 1024 * 1024},
      {"matmul_f32_2048", "matmul", {f32({2048, 2048}), f32({2048, 2048})}, {}, 0, 2 * 2048.0 * 2048 * 2048},
      {"matmul_f32_4096", "matmul", {f32({4096, 4096}), f32({4096, 4096})}, {}, 0, 2 * 4096.0 * 4096 * 4096},
      {"matmul_f32_8192", "matmul", {f32({8192, 8192}), f32({8192, 8192})}, {}, 0, 2 * n8k * 8192},
      {"matmul_f32_4095", "matmul", {f32({4095, 4095}), f32({4095, 4095})}, {}, 0, 2 * 4095.0 * 4095 * 4095},
      // a all NaN: on bf16 tensor cores every tile's sums are NaN, so every
      // tile is computed again in f32 arithmetic (docs/design.md).
      {"matmul_f32_4096_nan", "matmul", {f32({4096, 4096}), f32({4096, 4096})}, {}, 0, 2 * 4096.0 * 4096 * 4096, 0,
       0, std::nan("")},
      {"matmul_f16_4096", "matmul", {f16({4096, 4096}), f16({4096, 4096})}, {}, 0, 2 * 4096.0 * 4096 * 4096},
      {"matmul_f16_8192", "matmul", {f16({8192, 8192}), f16({8192, 8192})}, {}, 0, 2 * n8k * 8192},
      // The GEMM of conv2d_f16_32x64x56x56_k3 (64 channels by 576 taps, 100352 pixels), for reference.
      {"matmul_f16_64x576x100352", "matmul", {f16({64, 576}), f16({576, 100352})}, {}, 0, 2 * 64.0 * 576 * 100352},
      {"matmul_f16_2048", "matmul", {f16({2048, 2048}), f16({2048, 2048})}, {}, 0, 2 * 2048.0 * 2048 * 2048},
      // K and N not multiples of 8 (UNALIGNED on tensor cores): an odd size,
      // and a language model's output layer over a vocabulary of 50257.
      {"matmul_f16_4095", "matmul", {f16({4095, 4095}), f16({4095, 4095})}, {}, 0, 2 * 4095.0 * 4095 * 4095},
      {"matmul_f16_1023", "matmul", {f16({1023, 1023}), f16({1023, 1023})}, {}, 0, 2 * 1023.0 * 1023 * 1023},
      {"matmul_f16_255", "matmul", {f16({255, 255}), f16({255, 255})}, {}, 0, 2 * 255.0 * 255 * 255},
      {"linear_f16_8192x768x50257", "linear", {f16({8192, 768}), f16({50257, 768})}, {}, 0,
       2 * 8192.0 * 768 * 50257},
      {"linear_f16_8192x4096x4096", "linear", {f16({8192, 4096}), f16({4096, 4096}), f16({4096})}, {}, 0,
       2 * 8192.0 * 4096 * 4096},
      // A batch of 64 rows through a linear layer (inference): 64-row tiles.
      {"linear_f16_64x4096x4096", "linear", {f16({64, 4096}), f16({4096, 4096}), f16({4096})}, {}, 0,
       2 * 64.0 * 4096 * 4096},
      {"matmul_f16_1024", "matmul", {f16({1024, 1024}), f16({1024, 1024})}, {}, 0, 2 * 1024.0 * 1024 * 1024},
      // Weight-gradient shapes (split K).
      {"matmul_f16_512x32768x512", "matmul", {f16({512, 32768}), f16({32768, 512})}, {}, 0, 2 * 512.0 * 32768 * 512},
      {"matmul_f16_1024x16384x1024", "matmul", {f16({1024, 16384}), f16({16384, 1024})}, {}, 0,
       2 * 1024.0 * 16384 * 1024},
      {"matmul_bf16_1024", "matmul", {bf16({1024, 1024}), bf16({1024, 1024})}, {}, 0, 2 * 1024.0 * 1024 * 1024},
      {"matmul_bf16_2048", "matmul", {bf16({2048, 2048}), bf16({2048, 2048})}, {}, 0, 2 * 2048.0 * 2048 * 2048},
      {"matmul_bf16_4096", "matmul", {bf16({4096, 4096}), bf16({4096, 4096})}, {}, 0, 2 * 4096.0 * 4096 * 4096},
      {"matmul_bf16_8192", "matmul", {bf16({8192, 8192}), bf16({8192, 8192})}, {}, 0, 2 * n8k * 8192},
      // Transformer shapes: a feed-forward layer's up-projection (8192 tokens
      // of 1024 by 1024x4096), and attention scores, 32 heads of 512 tokens
      // by 64 (q @ k^T).
      {"matmul_f32_8192x1024x4096", "matmul", {f32({8192, 1024}), f32({1024, 4096})}, {}, 0, 2 * 8192.0 * 1024 * 4096},
      {"matmul_f16_8192x1024x4096", "matmul", {f16({8192, 1024}), f16({1024, 4096})}, {}, 0, 2 * 8192.0 * 1024 * 4096},
      {"bmm_f32_32x512x64x512", "bmm", {f32({32, 512, 64}), f32({32, 64, 512})}, {}, 0, 2 * 32 * 512.0 * 64 * 512},
      {"bmm_f16_32x512x64x512", "bmm", {f16({32, 512, 64}), f16({32, 64, 512})}, {}, 0, 2 * 32 * 512.0 * 64 * 512},
      {"matmul_f32_256x65536x256", "matmul", {f32({256, 65536}), f32({65536, 256})}, {}, 0, 2 * 256.0 * 65536 * 256},
      // Weight-gradient shapes: few output tiles, long K (split K).
      {"matmul_f32_512x32768x512", "matmul", {f32({512, 32768}), f32({32768, 512})}, {}, 0, 2 * 512.0 * 32768 * 512},
      {"matmul_f32_1024x16384x1024", "matmul", {f32({1024, 16384}), f32({16384, 1024})}, {}, 0,
       2 * 1024.0 * 16384 * 1024},
      {"linear_f32_8192x4096x4096", "linear", {f32({8192, 4096}), f32({4096, 4096}), f32({4096})}, {}, 0,
       2 * 8192.0 * 4096 * 4096},
      {"bmm_f32_32x1024x1024", "bmm", {f32({32, 1024, 1024}), f32({32, 1024, 1024})}, {}, 0, 2 * 32 * 1024.0 * 1024 * 1024},
      {"conv2d_8x64x56x56_k3", "conv2d", {f32({8, 64, 56, 56}), f32({64, 64, 3, 3})}, {{"padding", std::vector<int64_t>{1}}},
       0, 2 * 8.0 * 64 * 56 * 56 * 64 * 9},
      // ResNet-50's convolutions at batch 32 (flops: 2 * N * O * OH * OW * C * KH * KW).
      {"conv2d_32x64x56x56_k3", "conv2d", {f32({32, 64, 56, 56}), f32({64, 64, 3, 3})},
       {{"padding", std::vector<int64_t>{1}}}, 0, 2 * 32.0 * 64 * 56 * 56 * 64 * 9},
      {"conv2d_32x128x28x28_k3", "conv2d", {f32({32, 128, 28, 28}), f32({128, 128, 3, 3})},
       {{"padding", std::vector<int64_t>{1}}}, 0, 2 * 32.0 * 128 * 28 * 28 * 128 * 9},
      {"conv2d_32x256x14x14_k3", "conv2d", {f32({32, 256, 14, 14}), f32({256, 256, 3, 3})},
       {{"padding", std::vector<int64_t>{1}}}, 0, 2 * 32.0 * 256 * 14 * 14 * 256 * 9},
      {"conv2d_32x256x56x56_k1_to64", "conv2d", {f32({32, 256, 56, 56}), f32({64, 256, 1, 1})}, {}, 0,
       2 * 32.0 * 64 * 56 * 56 * 256},
      {"conv2d_32x64x56x56_k1_to256", "conv2d", {f32({32, 64, 56, 56}), f32({256, 64, 1, 1})}, {}, 0,
       2 * 32.0 * 256 * 56 * 56 * 64},
      {"conv2d_32x512x28x28_k1_to128", "conv2d", {f32({32, 512, 28, 28}), f32({128, 512, 1, 1})}, {}, 0,
       2 * 32.0 * 128 * 28 * 28 * 512},
      {"conv2d_32x1024x14x14_k1_to256", "conv2d", {f32({32, 1024, 14, 14}), f32({256, 1024, 1, 1})}, {}, 0,
       2 * 32.0 * 256 * 14 * 14 * 1024},
      {"conv2d_32x2048x7x7_k1_to512", "conv2d", {f32({32, 2048, 7, 7}), f32({512, 2048, 1, 1})}, {}, 0,
       2 * 32.0 * 512 * 7 * 7 * 2048},
      {"conv2d_32x3x224x224_k7s2", "conv2d", {f32({32, 3, 224, 224}), f32({64, 3, 7, 7})},
       {{"stride", std::vector<int64_t>{2}}, {"padding", std::vector<int64_t>{3}}}, 0, 2 * 32.0 * 64 * 112 * 112 * 3 * 49},
      {"conv2d_f16_32x64x56x56_k3", "conv2d", {f16({32, 64, 56, 56}), f16({64, 64, 3, 3})},
       {{"padding", std::vector<int64_t>{1}}}, 0, 2 * 32.0 * 64 * 56 * 56 * 64 * 9},
      {"conv2d_f16_32x128x28x28_k3", "conv2d", {f16({32, 128, 28, 28}), f16({128, 128, 3, 3})},
       {{"padding", std::vector<int64_t>{1}}}, 0, 2 * 32.0 * 128 * 28 * 28 * 128 * 9},
      {"conv2d_f16_32x256x14x14_k3", "conv2d", {f16({32, 256, 14, 14}), f16({256, 256, 3, 3})},
       {{"padding", std::vector<int64_t>{1}}}, 0, 2 * 32.0 * 256 * 14 * 14 * 256 * 9},
      {"conv2d_bf16_32x64x56x56_k3", "conv2d", {bf16({32, 64, 56, 56}), bf16({64, 64, 3, 3})},
       {{"padding", std::vector<int64_t>{1}}}, 0, 2 * 32.0 * 64 * 56 * 56 * 64 * 9},
      {"conv2d_f16_32x256x56x56_k1_to64", "conv2d", {f16({32, 256, 56, 56}), f16({64, 256, 1, 1})}, {}, 0,
       2 * 32.0 * 64 * 56 * 56 * 256},
      // 64 independent small adds: an optimizer's step over many small
      // parameters, where the device's gaps between ops weigh most.
      {"add_f32_256KiB_indep64", "add", {f32({64 << 10}), f32({64 << 10})}, {}, 3 * 256.0 * 1024, 0, 0, 64},
      {"add_f32_64B_indep64", "add", {f32({16}), f32({16})}, {}, 3 * 64.0, 0, 0, 64},  // the cost of an op itself
      {"add_f32_4MiB_indep64", "add", {f32({1 << 20}), f32({1 << 20})}, {}, 3 * 4.0 * (1 << 20), 0, 0, 64},
      {"layer_norm_256x1024_indep64", "layer_norm", {f32({256, 1024})}, {{"normalized_shape", std::vector<int64_t>{1024}}},
       2 * 4 * 256.0 * 1024, 0, 0, 64},
      // A decoder's 2x upsampler: 128 -> 64 channels, 28x28 -> 56x56.
      {"conv_transpose2d_32x128x28x28_k4s2", "conv_transpose2d", {f32({32, 128, 28, 28}), f32({128, 64, 4, 4})},
       {{"stride", std::vector<int64_t>{2}}, {"padding", std::vector<int64_t>{1}}}, 0, 2 * 32.0 * 128 * 28 * 28 * 64 * 16},
  };
  return c;
}

// `chains` pipelined chains (Case::chain) back to back, each from the
// input, one wait at the end: returns their wall time; *peakReserved takes
// the most device memory reserved while they were queued.
double runChains(Engine& engine, const OpSpec& spec, const Case& c, const Attrs& attrs,
                 const std::vector<TensorView>& in, int chains, uint64_t* peakReserved) {
  std::promise<void> done;
  auto t0 = Clock::now();
  for (int k = 0; k < chains; ++k) {
    TensorView y = in[0];
    for (int i = 0; i < c.chain; ++i) {
      TensorView out{y.desc, engine.allocate(y.desc.bytes(), "bench")};
      std::vector<TensorView> args{y};
      if (in.size() > 1) args.push_back(in[1]);
      Completion completion = [](std::exception_ptr) {};
      if (k + 1 == chains && i + 1 == c.chain) {
        completion = [&](std::exception_ptr e) {
          if (e) done.set_exception(e);
          else done.set_value();
        };
      }
      engine.enqueueOp("bench", spec, std::move(args), {out}, attrs, std::move(completion));
      y = std::move(out);  // the previous output is dropped while queued
      *peakReserved = std::max(*peakReserved, engine.memoryStats().reservedBytes);
    }
  }
  done.get_future().get();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// How many units (ops, chains) a trial takes: `count` if `count` of them
// took at least minTrialMs (`seconds`), else enough to (at most `most`).
int unitsPerTrial(int count, double seconds, double minTrialMs, int most) {
  if (seconds >= minTrialMs * 1e-3) return count;
  return std::max(count, int(std::min(std::ceil(count * minTrialMs * 1e-3 / seconds), double(most))));
}

void blocking(const std::function<void(Completion)>& enqueue) {
  std::promise<void> done;
  enqueue([&](std::exception_ptr e) {
    if (e) done.set_exception(e);
    else done.set_value();
  });
  done.get_future().get();
}

// The device time of the jobs run while timing is on, from the engine's
// DeviceTimeObserver (called on its completion thread).
class DeviceClock {
 public:
  void add(std::span<const DeviceTime> times) {
    std::lock_guard lock(mutex_);
    for (const DeviceTime& t : times) nanos_ += t.nanos;
  }
  // Device seconds of the work `run` enqueues and waits for: each job's
  // time between the timestamps around it, summed.
  double time(Engine& engine, const std::function<void()>& run) {
    {
      std::lock_guard lock(mutex_);
      nanos_ = 0;
    }
    engine.setDeviceTiming(true);
    run();
    engine.setDeviceTiming(false);
    std::lock_guard lock(mutex_);
    return double(nanos_) * 1e-9;
  }

 private:
  std::mutex mutex_;
  uint64_t nanos_ = 0;
};

ClientCase clientCase(const Case& c) {
  ClientCase cc{
      .op = c.op, .attrs = c.attrs, .chain = c.chain, .independent = c.independent, .fillFirst = c.fillFirst};
  for (const auto& d : c.inputs) cc.inputs.emplace_back(std::string(dtypeName(d.dtype)), d.shape);
  return cc;
}

// One case's figures: the engine's wall time, the device's and the client's
// (below 0: not measured), per call; and a chain's memory.
struct Figures {
  double seconds = 0;
  double deviceSeconds = -1;
  double clientSeconds = -1;
  std::string clientError;
  double coldSeconds = -1;  // chains: the first chain, per call
  uint64_t reservedBefore = 0, peakReserved = 0;
  std::vector<std::string> kernels;  // the kernel variants the case's calls dispatched
};

Figures measure(Engine& engine, DeviceClock& clock, const OpSpec& spec, const Case& c, int repeats,
                double minTrialMs) {
  Figures f;
  Attrs attrs = validateAttrs(spec, c.attrs);
  std::vector<TensorView> in;
  for (const auto& d : c.inputs) in.push_back({d, engine.allocate(d.bytes(), "bench")});
  // Inputs from randn, as PyTorch's and the client's (memory as allocated
  // may hold an earlier case's values: NaNs send f32 products on tensor
  // cores down their slow path); the first from full where the case says.
  for (size_t i = 0; i < in.size(); ++i) {
    const bool fill = i == 0 && c.fillFirst;
    const OpSpec& make = *engine.ops().find(fill ? "full" : "randn");
    std::vector<std::pair<std::string, AttrValue>> attrs = {{"size", in[i].desc.shape},
                                                            {"dtype", std::string(dtypeName(in[i].desc.dtype))}};
    if (fill) attrs.emplace_back("fill_value", *c.fillFirst);
    else attrs.emplace_back("seed", int64_t(i + 1));
    const Attrs made = validateAttrs(make, attrs);
    blocking([&](Completion done) { engine.enqueueOp("bench", make, {}, {in[i]}, made, std::move(done)); });
  }
  const std::map<std::string, uint64_t> before = engine.kernelDispatches();
  // trial(units) runs `units` units and waits for them: its wall seconds.
  std::function<double(int)> trial;
  int callsPerUnit = 1;
  int units = std::max(repeats, 1);
  std::vector<std::vector<TensorView>> ins, outs;
  if (c.chain > 0) {
    // A unit is a chain. The first chain is cold (it compiles the pipeline
    // and allocates). Trials of at least 5 chains: trials of 5 chains of 64
    // MiB (2.5 ms) read 2-5% low, the start and end of a trial included in
    // its time.
    engine.waitIdle();
    f.reservedBefore = f.peakReserved = engine.memoryStats().reservedBytes;
    callsPerUnit = c.chain;
    trial = [&](int chains) { return runChains(engine, spec, c, attrs, in, chains, &f.peakReserved); };
    f.coldSeconds = trial(1) / c.chain;
    units = 5;
  } else if (c.independent > 0) {
    // A unit is a round: call i of every round has inputs and outputs of its own.
    ins.resize(c.independent);
    outs.resize(c.independent);
    for (int i = 0; i < c.independent; ++i) {
      for (const auto& d : c.inputs) ins[i].push_back({d, engine.allocate(d.bytes(), "bench")});
      for (auto& d : inferOutputs(spec, c.inputs, attrs)) outs[i].push_back({d, engine.allocate(d.bytes(), "bench")});
    }
    callsPerUnit = c.independent;
    trial = [&](int rounds) {
      auto t0 = Clock::now();
      blocking([&](Completion done) {
        for (int r = 0; r < rounds; ++r) {
          for (int i = 0; i < c.independent; ++i) {
            const bool last = r + 1 == rounds && i + 1 == c.independent;
            engine.enqueueOp("bench", spec, ins[i], outs[i], attrs,
                             last ? std::move(done) : Completion([](std::exception_ptr) {}));
          }
        }
      });
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    trial(1);  // compiles the pipelines
  } else {
    // A unit is a call. They share submits, as a pipelined client's do.
    outs.emplace_back();
    for (auto& d : inferOutputs(spec, c.inputs, attrs)) outs[0].push_back({d, engine.allocate(d.bytes(), "bench")});
    trial = [&](int n) {
      auto t0 = Clock::now();
      blocking([&](Completion done) {
        for (int r = 0; r < n; ++r) {
          engine.enqueueOp("bench", spec, in, outs[0], attrs,
                           r + 1 == n ? std::move(done) : Completion([](std::exception_ptr) {}));
        }
      });
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    trial(1);  // compiles the pipelines
  }
  // At least `units` units, and enough for a trial of minTrialMs: trials of
  // a millisecond or two read up to 3x slow now and then (a thread waking
  // late, clocks ramping up), which a median of 3 did not hide.
  units = unitsPerTrial(units, trial(units), minTrialMs, c.chain > 0 ? 10000 : 100000);
  trial(units);  // a warm-up as long as a trial: the first case of a run used to read low
  std::vector<double> times;
  for (int t = 0; t < 5; ++t) times.push_back(trial(units) / (double(units) * callsPerUnit));
  std::sort(times.begin(), times.end());
  f.seconds = times[2];
  if (engine.measuresDeviceTime()) {
    f.deviceSeconds = clock.time(engine, [&] { trial(units); }) / (double(units) * callsPerUnit);
  }
  for (const auto& [name, count] : engine.kernelDispatches()) {
    auto it = before.find(name);
    if (count > (it == before.end() ? 0 : it->second)) f.kernels.push_back(name);
  }
  return f;
}

}  // namespace
}  // namespace tensord::bench

int main(int argc, char** argv) {
  using namespace tensord::bench;
  int repeats = 10;
  double minTrialMs = 20;
  std::vector<std::string> filters;
  std::filesystem::path daemon;
  bool viaClient = true;
  bool f32OnTensorCores = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) {
      repeats = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--min-trial-ms") && i + 1 < argc) {
      minTrialMs = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--tensord") && i + 1 < argc) {
      daemon = argv[++i];
    } else if (!std::strcmp(argv[i], "--no-client")) {
      viaClient = false;
    } else if (!std::strcmp(argv[i], "--matmul-f32") && i + 1 < argc &&
               (!std::strcmp(argv[i + 1], "fma") || !std::strcmp(argv[i + 1], "tensor_cores"))) {
      f32OnTensorCores = !std::strcmp(argv[++i], "tensor_cores");
    } else if (!std::strcmp(argv[i], "--filter") && i + 1 < argc) {
      std::string list = argv[++i];
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        if (comma > at) filters.push_back(list.substr(at, comma - at));
        at = comma + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--repeats N] [--min-trial-ms MS] [--filter SUBSTRING[,SUBSTRING...]] "
                   "[--matmul-f32 tensor_cores|fma] [--tensord PATH | --no-client]\n",
                   argv[0]);
      return 2;
    }
  }
  auto selected = [&](const std::string& name) {
    if (filters.empty()) return true;
    return std::any_of(filters.begin(), filters.end(),
                       [&](const std::string& f) { return name.find(f) != std::string::npos; });
  };
  auto log = spdlog::stderr_color_mt("op_bench");
  // TENSORD_PIPELINE_STATS logs each kernel's statistics at info level.
  log->set_level(std::getenv("TENSORD_PIPELINE_STATS") != nullptr ? spdlog::level::info : spdlog::level::warn);
  // The engine's figures first; then, with the engine gone and the device
  // the daemon's alone, the same cases through the client.
  std::vector<std::pair<const Case*, Figures>> measured;
  const std::vector<Case> all = cases();
  bool failed = false;
  {
    DeviceClock clock;
    EngineOptions options;
    options.logger = log;
    options.f32ProductsOnTensorCores = f32OnTensorCores;
    options.deviceTimeObserver = [&clock](std::span<const DeviceTime> times) { clock.add(times); };
    Engine engine(options);
    engine.setDeviceTiming(false);  // on only for the device trial of each case
    std::printf("%s\n", nlohmann::json{{"device", engine.device().name},
                                       {"device_time", engine.measuresDeviceTime()},
                                       {"client", viaClient}}
                            .dump()
                            .c_str());
    std::fflush(stdout);
    for (const Case& c : all) {
      if (!selected(c.name)) continue;
      try {
        const OpSpec* spec = engine.ops().find(c.op);
        if (!spec) throw std::runtime_error("no op " + c.op);
        engine.waitIdle();
        measured.emplace_back(&c, measure(engine, clock, *spec, c, repeats, minTrialMs));
      } catch (const std::exception& e) {
        std::printf("%s\n", nlohmann::json{{"case", c.name}, {"error", e.what()}}.dump().c_str());
        std::fflush(stdout);
        failed = true;
      }
    }
  }
  if (viaClient) {
    try {
      ClientTimer client(daemon.empty() ? defaultDaemonBinary() : daemon);
      for (auto& [c, f] : measured) {
        try {
          f.clientSeconds = client.secondsPerCall(clientCase(*c), repeats, minTrialMs);
        } catch (const std::exception& e) {
          f.clientError = e.what();
          failed = true;
        }
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "op_bench: could not start the daemon for the client's figures (--no-client skips "
                           "them): %s\n", e.what());
      failed = true;
    }
  }
  for (const auto& [c, f] : measured) {
    const double rate = c->flops ? c->flops / f.seconds / 1e12 : c->bytes / f.seconds / 1e9;
    nlohmann::json row{{"case", c->name}, {"seconds", f.seconds}, {c->flops ? "tflops" : "gbps", rate}};
    if (f.deviceSeconds >= 0) row["device_seconds"] = f.deviceSeconds;
    if (f.clientSeconds >= 0) row["client_seconds"] = f.clientSeconds;
    if (!f.clientError.empty()) row["client_error"] = f.clientError;
    row["kernels"] = f.kernels;
    if (f.coldSeconds >= 0) {
      row["cold_seconds"] = f.coldSeconds;
      row["reserved_before_bytes"] = f.reservedBefore;
      row["peak_reserved_bytes"] = f.peakReserved;
    }
    std::printf("%s\n", row.dump().c_str());
  }
  return failed ? 1 : 0;
}
