// The Session surface: authentication, op calls, names, bounds.

#include <algorithm>

#include "acl/token_authenticator.h"
#include "tests/server/server_fixture.h"

namespace tensord::server::testing {
namespace {

std::string text(const kj::Exception& e) { return e.getDescription().cStr(); }
bool contains(const kj::Exception& e, const std::string& needle) { return text(e).find(needle) != std::string::npos; }

class SessionTest : public ServerFixture {
 protected:
  void SetUp() override {
    Config config = testConfig();
    config.limits.maxTensorBytes = 1 << 20;
    config.limits.maxInflightCallsPerConnection = 2;
    start(config);
  }

  // Sends call(op, inputs) without waiting.
  capnp::RemotePromise<proto::Session::CallResults> call(
      proto::Session::Client& s, const char* op,
      std::initializer_list<std::reference_wrapper<proto::Tensor::Client>> inputs) {
    auto request = s.callRequest();
    request.setOp(op);
    auto list = request.initInputs(capnp::uint(inputs.size()));
    capnp::uint i = 0;
    for (auto& input : inputs) list.set(i++, input.get());
    return request.send();
  }

  void save(proto::Tensor::Client& t, const char* name, bool overwrite = false) {
    auto request = t.saveRequest();
    request.setName(name);
    request.setOverwrite(overwrite);
    request.send().wait(waitScope());
  }
};

// A Tensor served by the client, not by the daemon.
class ForeignTensor final : public proto::Tensor::Server {};

TEST_F(SessionTest, AuthenticationBindsThePrincipal) {
  auto daemon = connect();
  auto request = daemon.authenticateRequest();
  request.setToken("other-token");
  auto response = request.send().wait(waitScope());
  EXPECT_EQ(std::string(response.getPrincipal().cStr()), "other");
  auto who = response.getSession().whoamiRequest().send().wait(waitScope());
  EXPECT_EQ(std::string(who.getPrincipal().cStr()), "other");
}

TEST_F(SessionTest, WrongTokenFails) {
  auto daemon = connect();
  auto request = daemon.authenticateRequest();
  request.setToken("nope");
  auto e = errorOf(request.send());
  EXPECT_EQ(e.getType(), kj::Exception::Type::FAILED);
  EXPECT_TRUE(contains(e, "authentication failed: unknown token")) << text(e);
  // The connection still works.
  EXPECT_EQ(std::string(authenticate(daemon).whoamiRequest().send().wait(waitScope()).getPrincipal().cStr()), "tester");
}

TEST_F(SessionTest, ReloadedTokensApplyToNewAuthentications) {
  auto daemon = connect();
  auto s = authenticate(daemon);
  state_->tokens = std::make_shared<const acl::TokenAuthenticator>(
      std::vector<acl::TokenEntry>{{"fresh", acl::sha256Hex("fresh-token")}});
  EXPECT_EQ(
      std::string(authenticate(daemon, "fresh-token").whoamiRequest().send().wait(waitScope()).getPrincipal().cStr()),
      "fresh");
  auto request = daemon.authenticateRequest();
  request.setToken(kToken);
  EXPECT_TRUE(contains(errorOf(request.send()), "unknown token"));
  // Existing sessions keep working.
  EXPECT_EQ(std::string(s.whoamiRequest().send().wait(waitScope()).getPrincipal().cStr()), "tester");
}

TEST_F(SessionTest, InfoReportsLimitsAndChunkSize) {
  auto s = session();
  auto i = info(s);
  EXPECT_EQ(i.maxTensorBytes, 1u << 20);
  EXPECT_EQ(i.chunkBytes, 1u << 20);
  auto daemon = connect();
  auto bootstrapInfo = daemon.infoRequest().send().wait(waitScope()).getInfo();
  EXPECT_EQ(bootstrapInfo.getProtocolVersion(), proto::PROTOCOL_VERSION);
  EXPECT_GT(bootstrapInfo.getDevice().getName().size(), 0u);
}

TEST_F(SessionTest, ListOpsDescribesTheTable) {
  auto s = session();
  auto response = s.listOpsRequest().send().wait(waitScope());  // owns the message the readers point into
  auto ops = response.getOps();
  bool sawMatmul = false;
  for (auto op : ops) {
    if (std::string(op.getName().cStr()) != "matmul") continue;
    sawMatmul = true;
    ASSERT_EQ(op.getInputs().size(), 2u);
    EXPECT_EQ(std::string(op.getInputs()[0].cStr()), "input");
    EXPECT_EQ(std::string(op.getInputs()[1].cStr()), "other");
  }
  EXPECT_TRUE(sawMatmul);
}

TEST_F(SessionTest, PipelinedChainComputesAndCountsOps) {
  auto s = session();
  auto x = uploadFloats(s, {4}, {1, 2, 3, 4});
  const uint64_t before = info(s).opsExecuted;
  // Each call uses the previous output before it has returned.
  auto y = call(s, "add", {x, x}).getOutput();
  auto z = call(s, "mul", {y, x}).getOutput();
  auto w = call(s, "neg", {z}).getOutput();
  EXPECT_EQ(downloadFloats(w), (std::vector<float>{-2, -8, -18, -32}));
  EXPECT_EQ(info(s).opsExecuted, before + 3);
}

TEST_F(SessionTest, UnknownOpIsUnimplemented) {
  auto s = session();
  auto x = uploadFloats(s, {1}, {1});
  auto e = errorOf(call(s, "foo", {x}));
  EXPECT_EQ(e.getType(), kj::Exception::Type::UNIMPLEMENTED);
  EXPECT_TRUE(contains(e, "unknown op 'foo'")) << text(e);
}

TEST_F(SessionTest, ErrorsInAChainReachItsEnd) {
  auto s = session();
  auto a = uploadFloats(s, {2, 3}, std::vector<float>(6, 1));
  auto bad = call(s, "matmul", {a, a}).getOutput();
  auto e = errorOf(call(s, "relu", {bad}));
  EXPECT_TRUE(contains(e, "matmul")) << text(e);
}

TEST_F(SessionTest, OutputOverTheLimitNamesOpAndSizes) {
  auto s = session();
  auto col = uploadFloats(s, {1024, 1}, std::vector<float>(1024, 1));
  auto row = uploadFloats(s, {1, 1024}, std::vector<float>(1024, 1));
  auto e = errorOf(call(s, "matmul", {col, row}));
  EXPECT_EQ(e.getType(), kj::Exception::Type::FAILED);
  EXPECT_TRUE(contains(e, "matmul: output")) << text(e);
  EXPECT_TRUE(contains(e, "4194304 bytes); expected at most 1048576 bytes (limits.max_tensor_bytes)")) << text(e);
}

TEST_F(SessionTest, ForeignInputIsNamed) {
  auto s = session();
  auto x = uploadFloats(s, {1}, {1});
  proto::Tensor::Client foreign = kj::heap<ForeignTensor>();
  auto e = errorOf(call(s, "add", {x, foreign}));
  EXPECT_TRUE(contains(e, "add: input 'other' is not a tensor of this daemon")) << text(e);
}

TEST_F(SessionTest, ResultsGiveEveryOutputByIndex) {
  auto s = session();
  auto x = uploadFloats(s, {2}, {1, -1});
  auto results = call(s, "relu", {x}).getResults();
  auto request = results.getRequest();
  request.setIndex(0);
  auto y = request.send().getTensor();
  EXPECT_EQ(downloadFloats(y), (std::vector<float>{1, 0}));
  auto past = results.getRequest();
  past.setIndex(1);
  EXPECT_TRUE(contains(errorOf(past.send()), "relu: results.get(1): the op has 1 output(s)"));
}

TEST_F(SessionTest, NamesSaveRestoreListAndDelete) {
  auto s = session();
  auto a = uploadFloats(s, {2}, {1, 2});
  auto b = uploadFloats(s, {3}, {3, 4, 5});
  save(a, "w");
  auto again = b.saveRequest();
  again.setName("w");
  EXPECT_TRUE(contains(errorOf(again.send()), "save: a tensor named 'w' already exists"));
  save(b, "w", /*overwrite=*/true);

  auto restore = s.restoreRequest();
  restore.setName("w");
  auto w = restore.send().getTensor();
  EXPECT_EQ(downloadFloats(w), (std::vector<float>{3, 4, 5}));

  auto list = s.listTensorsRequest().send().wait(waitScope()).getTensors();
  ASSERT_EQ(list.size(), 2u);  // "w" (b) and the unnamed a
  EXPECT_EQ(std::string(list[0].getName().cStr()), "w");
  EXPECT_EQ(list[0].getDesc().getShape().size(), 1u);
  EXPECT_EQ(list[0].getBytes(), 12u);
  EXPECT_EQ(std::string(list[0].getOwner().cStr()), "tester");
  EXPECT_EQ(std::string(list[1].getName().cStr()), "");
  EXPECT_EQ(list[1].getBytes(), 8u);

  auto bad = a.saveRequest();
  bad.setName("has space");
  EXPECT_TRUE(contains(errorOf(bad.send()), "save: tensor name 'has space' has a character outside"));

  auto del = s.deleteTensorRequest();
  del.setName("w");
  del.send().wait(waitScope());
  auto missing = s.restoreRequest();
  missing.setName("w");
  EXPECT_TRUE(contains(errorOf(missing.send()), "no tensor named 'w'"));
  auto delAgain = s.deleteTensorRequest();
  delAgain.setName("w");
  EXPECT_TRUE(contains(errorOf(delAgain.send()), "no tensor named 'w'"));
}

// One listTensors page: its entries' labels (name, or #id when unnamed) and next.
struct Page {
  std::vector<std::string> labels;
  std::string next;
};

TEST_F(SessionTest, ListTensorsPagesAreSortedStableAndConcatenate) {
  auto s = session();
  auto listPage = [&](const std::string& prefix, const std::string& after, uint32_t limit) {
    auto request = s.listTensorsRequest();
    request.setPrefix(prefix);
    request.setAfter(after);
    request.setLimit(limit);
    auto response = request.send().wait(waitScope());
    Page page;
    for (auto info : response.getTensors()) {
      const std::string name = info.getName().cStr();
      page.labels.push_back(name.empty() ? "#" + std::to_string(info.getId()) : name);
    }
    page.next = response.getNext().cStr();
    return page;
  };
  auto listAll = [&](const std::string& prefix, uint32_t limit) {
    std::vector<std::string> all;
    std::string after;
    for (int pages = 0; pages < 100; ++pages) {
      Page page = listPage(prefix, after, limit);
      if (limit != 0) {
        EXPECT_LE(page.labels.size(), limit);
      }
      all.insert(all.end(), page.labels.begin(), page.labels.end());
      if (page.next.empty()) return all;
      EXPECT_EQ(page.next, page.labels.back());
      after = page.next;
    }
    ADD_FAILURE() << "paging did not end";
    return all;
  };

  // Ten names, saved out of order, and two unnamed tensors of this session.
  std::vector<std::string> names;
  std::vector<proto::Tensor::Client> kept;
  for (int i : {7, 2, 9, 0, 5, 3, 8, 1, 6, 4}) {
    auto t = uploadFloats(s, {1}, {float(i)});
    const std::string name = (i % 2 ? "odd/" : "even/") + std::to_string(i);
    save(t, name.c_str());
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  std::vector<std::string> unnamed;
  for (int i = 0; i < 2; ++i) {
    kept.push_back(uploadFloats(s, {1}, {0}));
    auto info = kept.back().infoRequest().send().wait(waitScope()).getInfo();
    unnamed.push_back("#" + std::to_string(info.getId()));
  }
  std::vector<std::string> everything = names;
  everything.insert(everything.end(), unnamed.begin(), unnamed.end());

  // Pages of 3 (the last one short), of exactly the size, and of the
  // default (0): the same listing, names in order, then the unnamed by id.
  EXPECT_EQ(listAll("", 3), everything);
  EXPECT_EQ(listAll("", 12), everything);
  EXPECT_EQ(listAll("", 0), everything);
  Page first = listPage("", "", 3);
  EXPECT_EQ(first.labels, (std::vector<std::string>{"even/0", "even/2", "even/4"}));
  EXPECT_EQ(first.next, "even/4");
  // A page ending on the last name leads into the unnamed tensors.
  Page lastNames = listPage("", "odd/5", 2);
  EXPECT_EQ(lastNames.labels, (std::vector<std::string>{"odd/7", "odd/9"}));
  EXPECT_EQ(lastNames.next, "odd/9");
  EXPECT_EQ(listPage("", "odd/9", 1).labels, std::vector<std::string>{unnamed[0]});
  EXPECT_EQ(listPage("", unnamed[0], 5).labels, std::vector<std::string>{unnamed[1]});
  EXPECT_EQ(listPage("", unnamed[1], 5).labels, std::vector<std::string>{});

  // A prefix keeps its names only (no unnamed tensors), paged the same way.
  EXPECT_EQ(listAll("odd/", 2), (std::vector<std::string>{"odd/1", "odd/3", "odd/5", "odd/7", "odd/9"}));
  Page odd = listPage("odd/", "", 5);
  EXPECT_EQ(odd.labels.size(), 5u);
  EXPECT_EQ(odd.next, "");  // exactly full, nothing after: no further page
  EXPECT_TRUE(listPage("nothing/", "", 0).labels.empty());

  // Stable: resuming after a name works whether or not it still exists, and
  // names saved behind the cursor do not shift what comes next.
  auto del = s.deleteTensorRequest();
  del.setName("even/4");
  del.send().wait(waitScope());
  auto extra = uploadFloats(s, {1}, {1});
  save(extra, "even/1");
  Page resumed = listPage("", "even/4", 3);
  EXPECT_EQ(resumed.labels, (std::vector<std::string>{"even/6", "even/8", "odd/1"}));

  // Bad arguments name themselves.
  auto badAfter = s.listTensorsRequest();
  badAfter.setAfter("#12x");
  EXPECT_TRUE(contains(errorOf(badAfter.send()), "listTensors: after '#12x' is neither a tensor name nor '#<id>'"));
  auto badPrefix = s.listTensorsRequest();
  badPrefix.setPrefix("a b");
  EXPECT_TRUE(contains(errorOf(badPrefix.send()), "listTensors: prefix: tensor name 'a b' has a character outside"));
}

TEST_F(SessionTest, TooManyCallsInFlightAreOverloadedAndTheConnectionSurvives) {
  auto s = session();
  auto x = uploadFloats(s, {1}, {2});
  // Inputs that are promises the client has not resolved keep calls in flight.
  auto paf = kj::newPromiseAndFulfiller<proto::Tensor::Client>();
  proto::Tensor::Client pending = kj::mv(paf.promise);
  auto first = call(s, "add", {x, pending});
  auto second = call(s, "add", {pending, x});
  EXPECT_TRUE(waitFor([&] { return state_->inflightCalls == 2; }));
  auto e = errorOf(call(s, "neg", {x}));
  EXPECT_EQ(e.getType(), kj::Exception::Type::OVERLOADED);
  EXPECT_TRUE(contains(e, "limits.max_inflight_calls_per_connection")) << text(e);
  paf.fulfiller->fulfill(proto::Tensor::Client(x));
  proto::Tensor::Client sum = first.wait(waitScope()).getOutput();
  EXPECT_EQ(downloadFloats(sum), std::vector<float>{4});
  second.wait(waitScope());
  auto y = call(s, "neg", {x}).getOutput();
  EXPECT_EQ(downloadFloats(y), std::vector<float>{-2});
}

TEST_F(SessionTest, DrainingRefusesNewCalls) {
  auto s = session();
  state_->draining = true;
  auto e = errorOf(s.whoamiRequest().send());
  EXPECT_EQ(e.getType(), kj::Exception::Type::DISCONNECTED);
  EXPECT_TRUE(contains(e, "whoami: tensord is shutting down")) << text(e);
  state_->draining = false;
}

}  // namespace
}  // namespace tensord::server::testing
