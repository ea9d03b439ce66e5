#pragma once
// The op table, family by family: each ops_<family>.cpp appends its entries.
// A newcomer looking for `softmax` opens ops_nn.cpp; for `gather`, ops_index.cpp.

#include <vector>

#include "compute/op_spec.h"

namespace tensord::compute {

void addElementwiseOps(std::vector<OpSpec>& ops);  // unary, binary, ternary math; comparisons; casts
void addReductionOps(std::vector<OpSpec>& ops);    // sum ... norm, scans, sort, topk
void addLinalgOps(std::vector<OpSpec>& ops);       // matmul & co, triu/tril
void addShapeOps(std::vector<OpSpec>& ops);        // reshape ... pad, flip, roll, cat, split
void addIndexOps(std::vector<OpSpec>& ops);        // gather, scatter, index_select, masked ops, where
void addNnOps(std::vector<OpSpec>& ops);           // softmax, norms, conv, pools, losses, attention
void addCreationOps(std::vector<OpSpec>& ops);     // zeros ... randn, arange, eye
void addConvOps(std::vector<OpSpec>& ops);  // conv, pooling, interpolate

// An entry with one output, "out": the shape most table entries have. The
// families' helpers set what differs (view, mutates, differentiable).
OpSpec singleOutputOp(std::string category, std::string name, std::vector<InputSpec> inputs,
                      std::vector<AttrSpec> attrs, std::vector<DType> dtypes,
                      std::shared_ptr<const KernelTemplate> kernel, std::string doc);

// Dtype lists the families share.
inline const std::vector<DType> kFloatDTypes = {DType::F32, DType::F16, DType::BF16};
inline const std::vector<DType> kIntDTypes = {DType::I32, DType::I64, DType::U8};
inline const std::vector<DType> kNumericDTypes = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8};
inline const std::vector<DType> kAllDTypes = {DType::F32, DType::F16, DType::BF16, DType::I32,
                                              DType::I64, DType::U8,  DType::Bool};

}  // namespace tensord::compute
