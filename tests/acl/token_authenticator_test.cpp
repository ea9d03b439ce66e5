#include "acl/token_authenticator.h"

#include <gtest/gtest.h>

namespace tensord::acl {
namespace {

TEST(Sha256HexTest, KnownDigests) {
  // printf %s ... | sha256sum
  EXPECT_EQ(sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256Hex("tensord-local"), "05c7f384ae29eb8715abed67c17e96ea63cd933e52ce70eab851f641384d17e9");
}

TEST(Sha256HexTest, RecognisesHexDigests) {
  EXPECT_TRUE(isSha256Hex(sha256Hex("x")));
  EXPECT_TRUE(isSha256Hex("05C7F384AE29EB8715ABED67C17E96EA63CD933E52CE70EAB851F641384D17E9"));
  EXPECT_FALSE(isSha256Hex(""));
  EXPECT_FALSE(isSha256Hex("05c7f384"));
  EXPECT_FALSE(isSha256Hex(std::string(63, 'a') + "g"));
  EXPECT_FALSE(isSha256Hex(std::string(65, 'a')));
}

TEST(TokenAuthenticatorTest, RightTokenGivesItsPrincipal) {
  TokenAuthenticator auth({{"alice", sha256Hex("alice-token")}, {"bob", sha256Hex("bob-token")}});
  EXPECT_EQ(auth.size(), 2u);
  auto alice = auth.authenticate("alice-token");
  ASSERT_TRUE(alice.has_value());
  EXPECT_EQ(alice->name, "alice");
  auto bob = auth.authenticate("bob-token");
  ASSERT_TRUE(bob.has_value());
  EXPECT_EQ(bob->name, "bob");
}

TEST(TokenAuthenticatorTest, WrongTokensAreRejected) {
  TokenAuthenticator auth({{"alice", sha256Hex("alice-token")}});
  EXPECT_FALSE(auth.authenticate("").has_value());
  EXPECT_FALSE(auth.authenticate("alice-token ").has_value());
  EXPECT_FALSE(auth.authenticate("alice-tokeN").has_value());
  EXPECT_FALSE(auth.authenticate("alice").has_value());
  // The digest itself is not a token.
  EXPECT_FALSE(auth.authenticate(sha256Hex("alice-token")).has_value());
}

TEST(TokenAuthenticatorTest, UpperCaseDigestsWork) {
  std::string hex = sha256Hex("t");
  for (char& c : hex) c = char(std::toupper(static_cast<unsigned char>(c)));
  TokenAuthenticator auth({{"p", hex}});
  EXPECT_TRUE(auth.authenticate("t").has_value());
}

TEST(TokenAuthenticatorTest, TokensWithNulBytesAreComparedWhole) {
  const std::string token("a\0b", 3);
  TokenAuthenticator auth({{"p", sha256Hex(token)}});
  EXPECT_TRUE(auth.authenticate(token).has_value());
  EXPECT_FALSE(auth.authenticate("a").has_value());
}

TEST(TokenAuthenticatorTest, BadEntriesAreRefusedNamingTheEntry) {
  try {
    TokenAuthenticator auth({{"ok", sha256Hex("x")}, {"bad", "1234"}});
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("token entry 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TokenAuthenticator({{"", sha256Hex("x")}}), std::invalid_argument);
}

TEST(TokenAuthenticatorTest, EmptyListAuthenticatesNobody) {
  TokenAuthenticator auth({});
  EXPECT_FALSE(auth.authenticate("anything").has_value());
}

}  // namespace
}  // namespace tensord::acl
