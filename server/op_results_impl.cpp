#include "server/op_results_impl.h"

#include "server/wire.h"

namespace tensord::server {

kj::Promise<void> OpResultsImpl::get(GetContext context) {
  const uint32_t index = context.getParams().getIndex();
  if (index >= outputs_.size()) {
    kj::throwFatalException(failed(op_ + ": results.get(" + std::to_string(index) + "): the op has " +
                                   std::to_string(outputs_.size()) + " output(s)"));
  }
  context.getResults().setTensor(outputs_[index]);
  return kj::READY_NOW;
}

}  // namespace tensord::server
