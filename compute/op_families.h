#pragma once
// The op table, family by family: each ops_<family>.cpp appends its entries.
// A newcomer looking for `softmax` opens ops_nn.cpp; for `gather`, ops_index.cpp.

#include <string_view>
#include <vector>

#include "compute/op_spec.h"

namespace tensord::compute {

class OpTable;

void addElementwiseOps(std::vector<OpSpec>& ops);  // unary, binary, ternary math; comparisons; casts
void addReductionOps(std::vector<OpSpec>& ops);    // sum ... norm, scans, sort, topk
void addLinalgOps(std::vector<OpSpec>& ops);       // matmul & co, triu/tril
void addShapeOps(std::vector<OpSpec>& ops);        // reshape ... pad, flip, roll, cat, split
void addIndexOps(std::vector<OpSpec>& ops);        // gather, scatter, index_select, masked ops, where
void addNnOps(std::vector<OpSpec>& ops);           // softmax, norms, conv, pools, losses, attention
void addCreationOps(std::vector<OpSpec>& ops);     // zeros ... randn, arange, eye
void addConvOps(std::vector<OpSpec>& ops);  // conv, pooling, interpolate
void addOptimizerOps(std::vector<OpSpec>& ops);  // sgd, adam, adamw, clip_grad_norm_, zero_: in place

// Backward ops, one file per forward family (ops_backward_<family>.cpp).
// They come after the forward ops (`ops` holds those already) and most are
// graph programs over the table's ops, so they take the table.
void addElementwiseBackwardOps(std::vector<OpSpec>& ops, const OpTable& table);
void addReductionBackwardOps(std::vector<OpSpec>& ops, const OpTable& table);
void addLinalgBackwardOps(std::vector<OpSpec>& ops, const OpTable& table);
void addShapeBackwardOps(std::vector<OpSpec>& ops, const OpTable& table);
void addIndexBackwardOps(std::vector<OpSpec>& ops, const OpTable& table);
void addNnBackwardOps(std::vector<OpSpec>& ops, const OpTable& table);
void addConvBackwardOps(std::vector<OpSpec>& ops, const OpTable& table);

// An entry with one output, "out": the shape most table entries have. The
// families' helpers set what differs (view, mutates, differentiable).
OpSpec singleOutputOp(std::string category, std::string name, std::vector<InputSpec> inputs,
                      std::vector<AttrSpec> attrs, std::vector<DType> dtypes,
                      std::shared_ptr<const KernelTemplate> kernel, std::string doc);

// The backward op of `forward` (named NAME_backward; OpTable links the two).
// The calling convention, which the client's autograd follows by name:
//   inputs  "grad" is the gradient of the forward op's first output (variadic
//           when the forward op's outputs are: split, chunk); "grad_<output>"
//           that of another output; a forward input's name is that input as
//           given to the forward call; a forward output's name ("out") is
//           that output.
//   attrs   the forward op's, all of them, passed as given to the forward call.
//   outputs "grad_<input>" for each differentiable forward input, in forward
//           order; a call returns one for each of them that the forward call
//           was given (one per tensor of a variadic input).
// `grads` names the forward inputs that get a gradient.
OpSpec backwardOp(const OpSpec& forward, std::vector<InputSpec> inputs, const std::vector<std::string>& grads,
                  std::shared_ptr<const KernelTemplate> kernel, std::string doc);
// The entry already in `ops` named `name` (backward families look their forward ops up).
const OpSpec& findOp(const std::vector<OpSpec>& ops, std::string_view name);

// Dtype lists the families share.
inline const std::vector<DType> kFloatDTypes = {DType::F32, DType::F16, DType::BF16};
inline const std::vector<DType> kIntDTypes = {DType::I32, DType::I64, DType::U8};
inline const std::vector<DType> kNumericDTypes = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8};
inline const std::vector<DType> kAllDTypes = {DType::F32, DType::F16, DType::BF16, DType::I32,
                                              DType::I64, DType::U8,  DType::Bool};

}  // namespace tensord::compute
