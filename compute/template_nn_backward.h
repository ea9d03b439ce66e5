#pragma once
// Kernel templates of the nn family's backward ops (ops_backward_nn.cpp)
// where a graph over the table's ops would take many passes or cannot be
// written: softmax / log_softmax, the norms, the class losses (nll_loss,
// cross_entropy), and two private steps of graph programs (embedding's
// sorted gather-sum, attention's softmax step). Kernels: softmax_backward,
// norm_backward(_affine), loss_backward, embedding_backward and
// attention_backward.comp.

#include <memory>
#include <span>

#include "compute/kernel_templates.h"
#include "compute/template_nn.h"

namespace tensord::compute {

// The outputs of forward op `forward` for the forward inputs of a call of
// `backward`, after the forward's own checks; a failing check is reported
// as `backward`'s error ("layer_norm_backward: layer_norm: input ...").
std::vector<TensorDesc> forwardOutputs(const OpSpec& backward, const OpSpec& forward,
                                       std::span<const TensorDesc> forwardInputs, const Attrs& attrs);

// softmax_backward / log_softmax_backward: inputs (grad, out).
std::shared_ptr<const KernelTemplate> softmaxBackwardTemplate(bool log);

// NAME_backward of the norms: inputs grad, then the forward's inputs;
// outputs grad_input, then grad_weight and grad_bias when those were given.
// `forward` is the forward op (its checks run on the forward inputs).
std::shared_ptr<const KernelTemplate> normBackwardTemplate(NormKind kind, std::shared_ptr<const OpSpec> forward);

// nll_loss_backward / cross_entropy_backward: inputs (grad, input, target,
// weight?); output grad_input.
std::shared_ptr<const KernelTemplate> classLossBackwardTemplate(LossKind kind, std::shared_ptr<const OpSpec> forward);

// Private step: inputs (grad [n, dim], sorted indices [n], their sorting
// permutation [n] (i64)), attrs rows and padding_idx; output the table
// gradient [rows, dim].
std::shared_ptr<const KernelTemplate> embeddingGatherSumTemplate();

// Private step: inputs (scores [..., L, S], dp of the same shape), attr
// is_causal; outputs P = softmax(scores) (causal- and fully-masked rows as
// the forward) and dS = P (dp - sum(P dp)) along S.
std::shared_ptr<const KernelTemplate> attentionSoftmaxBackwardTemplate();

}  // namespace tensord::compute
