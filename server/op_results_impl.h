#pragma once
// OpResultsImpl: the outputs of one call, by index, so a client can pipeline
// on any output of a multi-output op (`results.get(i)`).
//
// Threads: the event-loop thread only.

#include <kj/array.h>

#include <string>

#include "protocol/tensord.capnp.h"

namespace tensord::server {

class OpResultsImpl final : public proto::OpResults::Server {
 public:
  OpResultsImpl(std::string op, kj::Array<proto::Tensor::Client> outputs)
      : op_(std::move(op)), outputs_(kj::mv(outputs)) {}

 protected:
  kj::Promise<void> get(GetContext context) override;

 private:
  std::string op_;
  kj::Array<proto::Tensor::Client> outputs_;
};

}  // namespace tensord::server
