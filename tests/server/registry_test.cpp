#include "server/registry.h"

#include <gtest/gtest.h>

namespace tensord::server {
namespace {

compute::TensorDesc f32(std::vector<int64_t> shape) { return {compute::DType::F32, std::move(shape)}; }

TEST(RegistryTest, EntriesLiveWhileReferenced) {
  Registry registry;
  auto a = registry.add("alice", 1, f32({2, 3}), nullptr);
  auto b = registry.add("alice", 1, f32({4}), nullptr);
  EXPECT_NE(a->id, b->id);
  EXPECT_EQ(a->bytes(), 24u);
  EXPECT_EQ(registry.liveCount(), 2u);
  b.reset();
  EXPECT_EQ(registry.liveCount(), 1u);
  EXPECT_EQ(a->label(), "#" + std::to_string(a->id));
}

TEST(RegistryTest, NamesKeepEntriesAlive) {
  Registry registry;
  auto a = registry.add("alice", 1, f32({1}), nullptr);
  const uint64_t id = a->id;
  ASSERT_TRUE(registry.save(a, "w", false));
  a.reset();
  EXPECT_EQ(registry.liveCount(), 1u);
  EXPECT_EQ(registry.namedCount(), 1u);
  auto found = registry.findNamed("w");
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->id, id);
  EXPECT_EQ(found->label(), "w");
  found.reset();
  EXPECT_TRUE(registry.remove("w"));
  EXPECT_FALSE(registry.remove("w"));
  EXPECT_EQ(registry.liveCount(), 0u);
  EXPECT_EQ(registry.findNamed("w"), nullptr);
}

TEST(RegistryTest, SaveRefusesATakenNameUnlessOverwriting) {
  Registry registry;
  auto a = registry.add("alice", 1, f32({1}), nullptr);
  auto b = registry.add("bob", 2, f32({2}), nullptr);
  ASSERT_TRUE(registry.save(a, "w", false));
  EXPECT_TRUE(registry.save(a, "w", false));  // same entry: nothing to do
  EXPECT_FALSE(registry.save(b, "w", false));
  EXPECT_EQ(registry.findNamed("w"), a);
  EXPECT_TRUE(registry.save(b, "w", true));
  EXPECT_EQ(registry.findNamed("w"), b);
  EXPECT_TRUE(a->names.empty());
  std::weak_ptr<TensorEntry> weakA = a;
  a.reset();
  EXPECT_TRUE(weakA.expired());  // lost its name and its last reference
}

TEST(RegistryTest, AnEntryMayHaveSeveralNames) {
  Registry registry;
  auto a = registry.add("alice", 1, f32({1}), nullptr);
  registry.save(a, "x", false);
  registry.save(a, "y", false);
  auto named = registry.named();
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "x");
  EXPECT_EQ(named[1].first, "y");
  registry.remove("x");
  EXPECT_EQ(a->label(), "y");
}

TEST(RegistryTest, UnnamedOfSessionListsOnlyThatSessionsUnnamedEntries) {
  Registry registry;
  auto a = registry.add("alice", 1, f32({1}), nullptr);
  auto b = registry.add("alice", 1, f32({1}), nullptr);
  auto c = registry.add("alice", 2, f32({1}), nullptr);
  registry.save(b, "b", false);
  auto mine = registry.unnamedOfSession(1);
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0], a);
  EXPECT_EQ(registry.unnamedOfSession(2).size(), 1u);
  EXPECT_TRUE(registry.unnamedOfSession(3).empty());
}

TEST(RegistryTest, TensorNameRules) {
  EXPECT_EQ(tensorNameProblem("model/layer1.weight"), "");
  EXPECT_EQ(tensorNameProblem("a-b_c:d@e+f"), "");
  EXPECT_NE(tensorNameProblem(""), "");
  EXPECT_NE(tensorNameProblem("a b"), "");
  EXPECT_NE(tensorNameProblem("tab\there"), "");
  EXPECT_NE(tensorNameProblem(std::string(257, 'a')), "");
  EXPECT_EQ(tensorNameProblem(std::string(256, 'a')), "");
}

}  // namespace
}  // namespace tensord::server
