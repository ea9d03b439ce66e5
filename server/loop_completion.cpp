#include "server/loop_completion.h"

#include <memory>

#include "server/wire.h"

namespace tensord::server {

LoopCompletion makeLoopCompletion() {
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  // std::function needs a copyable callable: share the one fulfiller.
  auto fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<void>>>(kj::mv(paf.fulfiller));
  compute::Completion completion = [fulfiller](std::exception_ptr error) {
    if (error) {
      (*fulfiller)->reject(fromExceptionPtr(error));
    } else {
      (*fulfiller)->fulfill();
    }
  };
  return {std::move(completion), kj::mv(paf.promise)};
}

}  // namespace tensord::server
