// The op library through a real daemon: the introspection fields of protocol
// version 2, views sharing memory, scalar operands, optional and variadic
// inputs, dtype conversion, and an error that leaves the daemon serving.

#include <algorithm>
#include <cstring>
#include <span>

#include "tests/integration/daemon_test.h"

namespace tensord::testing {
namespace {

class IntegrationOpLibrary : public DaemonTest {};

const OpInfo* findOp(const std::vector<OpInfo>& ops, const std::string& name) {
  auto it = std::find_if(ops.begin(), ops.end(), [&](const OpInfo& op) { return op.name == name; });
  return it == ops.end() ? nullptr : &*it;
}

const AttrSpec* findAttr(const OpInfo& op, const std::string& name) {
  for (const auto& a : op.attrs) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

// The name of the ints attribute of reshape (PyTorch calls it `shape`).
std::string reshapeAttr(Client& client) {
  auto ops = client.ops();
  const OpInfo* reshape = findOp(ops, "reshape");
  if (reshape == nullptr) return "shape";
  for (const auto& a : reshape->attrs) {
    if (a.type == "ints") return a.name;
  }
  return "shape";
}

uint64_t liveBytes(Client& client) { return client.info().memory.liveBytes; }

TEST_F(IntegrationOpLibrary, OpsListingHasProtocol2Fields) {
  auto client = connect();
  DaemonInfo info = client->info();
  EXPECT_EQ(info.protocolVersion, 9u);
  EXPECT_NE(std::find(info.device.dtypes.begin(), info.device.dtypes.end(), DType::F32), info.device.dtypes.end());

  auto ops = client->ops();
  const OpInfo* add = findOp(ops, "add");
  ASSERT_NE(add, nullptr);
  ASSERT_EQ(add->inputSpecs.size(), 2u);
  EXPECT_EQ(add->inputs, (std::vector<std::string>{"input", "other"}));  // the names stay filled
  EXPECT_EQ(add->inputSpecs[0].name, "input");
  EXPECT_EQ(add->inputSpecs[0].role, "data");
  EXPECT_FALSE(add->inputSpecs[0].optional);
  EXPECT_TRUE(add->inputSpecs[1].optional);
  EXPECT_FALSE(add->inputSpecs[1].variadic);
  EXPECT_FALSE(add->view);
  EXPECT_TRUE(add->mutates.empty());
  EXPECT_TRUE(add->differentiable);
  const AttrSpec* other = findAttr(*add, "other");
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->type, "scalar");
  EXPECT_FALSE(other->required);
  EXPECT_FALSE(other->hasDefault);
  const AttrSpec* alpha = findAttr(*add, "alpha");
  ASSERT_NE(alpha, nullptr);
  EXPECT_TRUE(alpha->hasDefault);
  EXPECT_EQ(alpha->defaultValue, AttrValue(int64_t(1)));

  const OpInfo* eq = findOp(ops, "eq");
  ASSERT_NE(eq, nullptr);
  EXPECT_FALSE(eq->differentiable);

  const OpInfo* reshape = findOp(ops, "reshape");
  ASSERT_NE(reshape, nullptr) << "no reshape op";
  EXPECT_TRUE(reshape->view);

  const OpInfo* gather = findOp(ops, "gather");
  ASSERT_NE(gather, nullptr) << "no gather op";
  bool sawIndex = false;
  for (const auto& in : gather->inputSpecs) sawIndex |= in.role == "index";
  EXPECT_TRUE(sawIndex) << "gather has no input of role index";

  const OpInfo* cat = findOp(ops, "cat");
  ASSERT_NE(cat, nullptr) << "no cat op";
  ASSERT_FALSE(cat->inputSpecs.empty());
  EXPECT_TRUE(cat->inputSpecs.back().variadic);
}

TEST_F(IntegrationOpLibrary, ReshapeSharesMemory) {
  auto client = connect();
  const std::string shapeAttr = reshapeAttr(*client);
  std::vector<float> values(4 * 6);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i) - 7.5f;
  Tensor x = client->upload(Shape{4, 6}, values);
  x.wait();
  const uint64_t before = liveBytes(*client);
  const uint64_t tensorsBefore = client->info().memory.tensorCount;
  EXPECT_GE(before, values.size() * sizeof(float));

  Tensor y = client->call1("reshape", {x}, {{shapeAttr, std::vector<int64_t>{2, 3, 4}}});
  Tensor z = client->call1("reshape", {y}, {{shapeAttr, std::vector<int64_t>{24}}});
  EXPECT_EQ(y.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(z.shape(), (Shape{24}));
  EXPECT_EQ(liveBytes(*client), before) << "a view allocated memory";
  EXPECT_EQ(client->info().memory.tensorCount, tensorsBefore + 2);
  EXPECT_EQ(y.toHost(), values);
  EXPECT_EQ(z.toHost(), values);

  // The base handle dropped: the memory lives on with the views, counted once.
  x = Tensor();
  ASSERT_TRUE(waitUntil([&] { return client->info().memory.tensorCount == tensorsBefore + 1; },
                        std::chrono::seconds(10)));
  EXPECT_EQ(liveBytes(*client), before);
  EXPECT_EQ(z.toHost(), values);

  // An op on a view reads the shared memory; its output is new memory.
  Tensor doubled = y + y;
  std::vector<float> got = doubled.toHost();
  ASSERT_EQ(got.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(got[i], 2 * values[i]);
  EXPECT_EQ(liveBytes(*client), before + values.size() * sizeof(float));
  doubled = Tensor();

  // Dropping every view frees the buffer.
  y = Tensor();
  z = Tensor();
  EXPECT_TRUE(waitUntil([&] { return liveBytes(*client) + values.size() * sizeof(float) <= before; },
                        std::chrono::seconds(10)))
      << "live bytes stayed at " << liveBytes(*client);
}

TEST_F(IntegrationOpLibrary, ViewOfPipelinedInput) {
  auto client = connect();
  const std::string shapeAttr = reshapeAttr(*client);
  auto a = randomFloats(6 * 5, 71);
  auto b = randomFloats(5 * 4, 72);
  Tensor ta = client->upload(Shape{6, 5}, a);
  Tensor tb = client->upload(Shape{5, 4}, b);
  // reshape of a matmul result that is still in flight, then an op on the view.
  Tensor flat = client->call1("reshape", {matmul(ta, tb)}, {{shapeAttr, std::vector<int64_t>{24}}});
  Tensor total = sum(flat, 0);
  MatmulReference ref = matmulReference(a, b, 6, 5, 4);
  std::vector<float> got = flat.toHost();
  ASSERT_EQ(got.size(), 24u);
  double expected = 0, magnitude = 0;
  for (size_t i = 0; i < 24; ++i) {
    EXPECT_NEAR(got[i], ref.value[i], 1e-4 * ref.magnitude[i] + 1e-6) << "element " << i;
    expected += ref.value[i];
    magnitude += ref.magnitude[i];
  }
  EXPECT_NEAR(total.toHost().at(0), expected, 1e-4 * magnitude + 1e-6);

  // A view of an input whose call failed carries that failure.
  Tensor bad = client->call1("reshape", {sum(ta, 7)}, {{shapeAttr, std::vector<int64_t>{-1}}});
  try {
    bad.wait();
    ADD_FAILURE() << "a view of a failed tensor exists";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sum"), std::string::npos) << e.what();
  }
}

TEST_F(IntegrationOpLibrary, ScalarOperandsAndOptionalInputs) {
  auto client = connect();
  std::vector<float> values = {-1.5f, 0.0f, 2.25f, 10.0f};
  Tensor x = client->upload(Shape{2, 2}, values);

  // `other` as a float scalar attribute, the tensor input `other` left off.
  Tensor plus = client->call1("add", {x}, {{"other", 2.5}});
  // As an int scalar, with alpha.
  Tensor minus = client->call1("sub", {x}, {{"other", int64_t(2)}, {"alpha", int64_t(3)}});
  // And as a tensor, for comparison.
  Tensor both = client->call1("add", {x, x});
  std::vector<float> gotPlus = plus.toHost(), gotMinus = minus.toHost(), gotBoth = both.toHost();
  ASSERT_EQ(gotPlus.size(), 4u);
  ASSERT_EQ(gotMinus.size(), 4u);
  ASSERT_EQ(gotBoth.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(gotPlus[i], values[i] + 2.5f) << i;
    EXPECT_EQ(gotMinus[i], values[i] - 6.0f) << i;
    EXPECT_EQ(gotBoth[i], values[i] * 2) << i;
  }
  EXPECT_EQ(plus.dtype(), DType::F32);

  // Kept as given: an int scalar leaves an i32 tensor i32, a float one makes it f32.
  std::vector<int32_t> ints = {1, -2, 3, 40};
  Tensor xi = client->upload(DType::I32, Shape{4}, std::as_bytes(std::span(ints)));
  Tensor intPlus = client->call1("add", {xi}, {{"other", int64_t(2)}});
  Tensor floatPlus = client->call1("add", {xi}, {{"other", 2.5}});
  EXPECT_EQ(intPlus.dtype(), DType::I32);
  EXPECT_EQ(floatPlus.dtype(), DType::F32);
  auto intBytes = intPlus.bytes();
  ASSERT_EQ(intBytes.size(), 16u);
  std::vector<int32_t> gotInts(4);
  std::memcpy(gotInts.data(), intBytes.data(), 16);
  EXPECT_EQ(gotInts, (std::vector<int32_t>{3, 0, 5, 42}));
  EXPECT_EQ(floatPlus.toHost(), (std::vector<float>{3.5f, 0.5f, 5.5f, 42.5f}));
}

TEST_F(IntegrationOpLibrary, VariadicInputs) {
  auto client = connect();
  Tensor a = client->upload(Shape{1, 2}, std::vector<float>{1, 2});
  Tensor b = client->upload(Shape{2, 2}, std::vector<float>{3, 4, 5, 6});
  Tensor c = client->upload(Shape{1, 2}, std::vector<float>{7, 8});
  Tensor joined = client->call1("cat", {a, b, c}, {{"dim", int64_t(0)}});
  EXPECT_EQ(joined.shape(), (Shape{4, 2}));
  EXPECT_EQ(joined.toHost(), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  Tensor one = client->call1("cat", {b}, {{"dim", int64_t(1)}});
  EXPECT_EQ(one.toHost(), (std::vector<float>{3, 4, 5, 6}));
}

TEST_F(IntegrationOpLibrary, F16RoundTripThroughTo) {
  auto client = connect();
  auto dtypes = client->info().device.dtypes;
  if (std::find(dtypes.begin(), dtypes.end(), DType::F16) == dtypes.end()) {
    GTEST_SKIP() << "the device holds no f16 tensors";
  }
  // Values f16 holds exactly.
  std::vector<float> values = {0.5f, -2.0f, 1024.0f, 3.25f, -0.125f, 65504.0f};
  Tensor x = client->upload(Shape{2, 3}, values);
  Tensor half = client->call1("to", {x}, {{"dtype", std::string("f16")}});
  EXPECT_EQ(half.dtype(), DType::F16);
  EXPECT_EQ(half.shape(), (Shape{2, 3}));
  std::vector<std::byte> bytes = half.bytes();
  ASSERT_EQ(bytes.size(), values.size() * 2);
  std::vector<uint16_t> bits(values.size());
  std::memcpy(bits.data(), bytes.data(), bytes.size());
  EXPECT_EQ(bits, (std::vector<uint16_t>{0x3800, 0xC000, 0x6400, 0x4280, 0xB000, 0x7BFF}));

  // An uploaded f16 tensor converts back to the same f32 values.
  Tensor uploaded = client->upload(DType::F16, Shape{6}, bytes);
  Tensor back = client->call1("to", {uploaded}, {{"dtype", std::string("f32")}});
  EXPECT_EQ(back.toHost(), values);
  EXPECT_EQ(client->call1("to", {half}, {{"dtype", std::string("f32")}}).toHost(), values);
}

TEST_F(IntegrationOpLibrary, BadDimFailsTheCallOnly) {
  auto client = connect();
  Tensor x = client->upload(Shape{2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  x.save("kept");
  try {
    sum(x, 5).toHost();
    ADD_FAILURE() << "sum over dim 5 of a 2-d tensor succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kFailed);
    EXPECT_NE(std::string(e.what()).find("sum"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("dim"), std::string::npos) << e.what();
  }
  try {
    client->call1("softmax", {x}, {{"dim", int64_t(-3)}}).wait();
    ADD_FAILURE() << "softmax over dim -3 of a 2-d tensor succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("softmax"), std::string::npos) << e.what();
  }
  // The connection, the daemon and the stored tensor are fine.
  EXPECT_EQ(sum(x, 1).toHost(), (std::vector<float>{6, 15}));
  auto other = connect();
  EXPECT_EQ(sum(other->restore("kept"), 0).toHost(), (std::vector<float>{5, 7, 9}));
}

TEST_F(IntegrationOpLibrary, IndexOutOfRangeFailsOnTheDeviceAndReachesPipelinedCalls) {
  auto client = connect();
  Tensor x = client->upload(Shape{2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  std::vector<int64_t> bad = {0, 7};  // dim 1 has size 3
  Tensor index = client->upload(DType::I64, Shape{2, 1}, std::as_bytes(std::span(bad)));
  Tensor picked = client->call1("gather", {x, index}, {{"dim", int64_t(1)}});
  Tensor doubled = client->call1("mul", {picked}, {{"other", 2.0}});  // pipelined on the failed output
  for (Tensor* t : {&picked, &doubled}) {
    try {
      t->toHost();
      ADD_FAILURE() << "reading the result of a gather with index 7 succeeded";
    } catch (const Error& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("gather"), std::string::npos) << what;
      EXPECT_NE(what.find("index 7 is out of range"), std::string::npos) << what;
    }
  }
  // The daemon keeps serving, this connection included.
  std::vector<int64_t> good = {2, 0};
  Tensor index2 = client->upload(DType::I64, Shape{2, 1}, std::as_bytes(std::span(good)));
  EXPECT_EQ(client->call1("gather", {x, index2}, {{"dim", int64_t(1)}}).toHost(), (std::vector<float>{3, 4}));
}

TEST_F(IntegrationOpLibrary, MaskedSelectLengthComesFromTheDevice) {
  auto client = connect();
  Tensor x = client->upload(Shape{2, 3}, std::vector<float>{1, -2, 3, -4, 5, -6});
  // The mask is computed on the device and the chain is pipelined: the
  // daemon learns the output length only when the comparison has run.
  Tensor mask = client->call1("gt", {x}, {{"other", 0.0}});
  Tensor positive = client->call1("masked_select", {x, mask});
  Tensor total = sum(positive, 0);
  EXPECT_EQ(positive.toHost(), (std::vector<float>{1, 3, 5}));
  EXPECT_EQ(total.toHost(), (std::vector<float>{9}));
}

}  // namespace
}  // namespace tensord::testing
