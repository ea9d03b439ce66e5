// The op table and the conformance suite agree: every op has a case.

#include <gtest/gtest.h>

#include <algorithm>

#include "compute/op_table.h"
#include "tests/compute/conformance.h"

namespace tensord::compute::testing {
namespace {

TEST(OpCoverage, EveryOpInTheTableHasAConformanceCase) {
  OpTable table;
  const auto& covered = coveredOps();
  std::string missing;
  for (const OpSpec& op : table.all()) {
    if (std::find(covered.begin(), covered.end(), op.name) == covered.end()) missing += " " + op.name;
  }
  EXPECT_EQ(missing, "") << "ops without a conformance case:" << missing;
}

TEST(OpCoverage, EveryCaseNamesARealOp) {
  OpTable table;
  for (const auto& name : coveredOps()) EXPECT_NE(table.find(name), nullptr) << "no op '" << name << "'";
}

}  // namespace
}  // namespace tensord::compute::testing
