#pragma once
// The nn templates (ops_nn.cpp): softmax / log_softmax, the norms
// (layer_norm, rms_norm, group_norm, batch_norm), embedding, dropout, the
// losses and scaled_dot_product_attention. Row-wise kernels share
// kernels/norm_rows.glsl: a row is handled by one invocation when it is short
// (or rows are many and strided) and by one workgroup otherwise.

#include <memory>

#include "compute/kernel_templates.h"

namespace tensord::compute {

std::shared_ptr<const KernelTemplate> softmaxTemplate(bool log);

enum class NormKind { kLayer, kRms, kGroup, kBatch };
std::shared_ptr<const KernelTemplate> normTemplate(NormKind kind);

std::shared_ptr<const KernelTemplate> embeddingTemplate();
std::shared_ptr<const KernelTemplate> dropoutTemplate();

// Matches KIND in kernels/loss.comp.
enum class LossKind { kMse, kL1, kSmoothL1, kBce, kBceLogits, kKlDiv, kNll, kCrossEntropy };
std::shared_ptr<const KernelTemplate> lossTemplate(LossKind kind);

std::shared_ptr<const KernelTemplate> attentionTemplate();

// The 24-bit dropout hash of element `index` under `seed` (kernels/dropout.comp);
// the element is kept when it is >= ceil(p * 2^24).
uint32_t dropoutHash(uint64_t seed, uint32_t index);
uint32_t dropoutThreshold(double p);

}  // namespace tensord::compute
