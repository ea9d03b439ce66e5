#pragma once
// The registry of built-in ops, built from the declarative table in op_table.cpp.

#include <span>
#include <string_view>
#include <vector>

#include "compute/op_spec.h"

namespace tensord::compute {

class OpTable {
 public:
  OpTable();  // the built-in ops
  // Graph templates refer to the table they belong to: it stays where it is.
  OpTable(const OpTable&) = delete;
  OpTable& operator=(const OpTable&) = delete;
  const OpSpec* find(std::string_view name) const;  // nullptr if unknown
  std::span<const OpSpec> all() const { return ops_; }

 private:
  std::vector<OpSpec> ops_;  // sorted by name
};

}  // namespace tensord::compute
