// libFuzzer target: the JSON access policy parser, fed arbitrary bytes as the
// policy file text. A PolicyError is the expected answer to bad input;
// anything else escaping, a sanitizer report or a hang is a bug.
//
// A policy that parses is also asked a few questions, so rule patterns taken
// from the input meet the glob matcher.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "acl/policy_json.h"

namespace {

using tensord::acl::Action;
using tensord::acl::JsonPolicy;

void ask(const JsonPolicy& policy) {
  // The principals of config/policy.example.json and names the fuzzer finds
  // easily; resources shaped like the ones the server passes.
  static constexpr std::string_view kPrincipals[] = {"alice", "bob", "ops", "a"};
  static constexpr struct {
    Action action;
    std::string_view resource, category;
  } kRequests[] = {
      {Action::kCallOp, "add", "elementwise"},   {Action::kCallOp, "matmul", "linalg"},
      {Action::kReadTensor, "alice/w", ""},      {Action::kReadTensor, "#7", ""},
      {Action::kWriteTensor, "", ""},            {Action::kSaveTensor, "shared/x/y.z", ""},
      {Action::kDeleteTensor, "[a]*?", ""},      {Action::kRestoreTensor, "shared/model", ""},
      {Action::kListTensors, "", ""},            {Action::kAdminReload, "", ""},
      {Action::kAdminUsage, "", ""},
  };
  for (std::string_view name : kPrincipals) {
    const tensord::acl::Principal principal{std::string(name)};
    (void)policy.quotas(name);
    (void)policy.roles(name);
    for (const auto& r : kRequests) (void)policy.decide(principal, {r.action, r.resource, r.category});
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto policy = JsonPolicy::parse(std::string_view(reinterpret_cast<const char*>(data), size));
    ask(*policy);
  } catch (const tensord::acl::PolicyError&) {
    // Rejected with a message: the expected outcome for most inputs.
  }
  return 0;
}
