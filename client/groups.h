#pragma once
// Session.collective, pipelined, with the completion of the request kept for
// callers that must wait for a collective with no outputs (barrier). Internal.

#include <memory>
#include <string_view>
#include <vector>

#include "client/connection.h"

namespace tensord::detail {

struct Collective {
  std::vector<Tensor> outputs;
  std::shared_ptr<PendingCall> done;  // the daemon's answer: resolves when the collective finished
};

// How many outputs a collective of `kind` on `inputs` tensors returns.
size_t collectiveOutputCount(std::string_view kind, size_t inputs);

Collective collectiveOp(const std::shared_ptr<Connection>& conn, std::string_view group, std::string_view kind,
                        const std::vector<Tensor>& inputs, const Attrs& attrs);

}  // namespace tensord::detail
