#pragma once
// The one error type compute/ throws. Its kind tells the server which wire
// exception to raise; its message is meant for a person.

#include <stdexcept>
#include <string>

namespace tensord::compute {

class ComputeError : public std::runtime_error {
 public:
  enum class Kind {
    kInvalid,      // bad input: shapes, arity, attributes, sizes
    kUnsupported,  // unknown op or dtype the op does not take
    kOutOfMemory,  // device memory or configured limit exhausted
    kDevice,       // the Vulkan device failed (lost, driver error)
  };

  ComputeError(Kind kind, std::string message) : std::runtime_error(std::move(message)), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

[[noreturn]] inline void throwInvalid(std::string message) {
  throw ComputeError(ComputeError::Kind::kInvalid, std::move(message));
}

}  // namespace tensord::compute
