// Translating Cap'n Proto exceptions into tensord::Error.

#include "client/errors.h"

#include <gtest/gtest.h>

namespace tensord::errors {
namespace {

TEST(Errors, KindsFollowTheExceptionType) {
  using T = kj::Exception::Type;
  EXPECT_EQ(kindOf(kj::Exception(T::FAILED, "f", 1, kj::str("x"))), Error::Kind::kFailed);
  EXPECT_EQ(kindOf(kj::Exception(T::OVERLOADED, "f", 1, kj::str("x"))), Error::Kind::kOverloaded);
  EXPECT_EQ(kindOf(kj::Exception(T::DISCONNECTED, "f", 1, kj::str("x"))), Error::Kind::kDisconnected);
  EXPECT_EQ(kindOf(kj::Exception(T::UNIMPLEMENTED, "f", 1, kj::str("x"))), Error::Kind::kUnimplemented);
}

TEST(Errors, CleansRemotePrefixesAndLocations) {
  EXPECT_EQ(cleanMessage("remote exception: matmul: input 'b' has shape [3, 5]"), "matmul: input 'b' has shape [3, 5]");
  EXPECT_EQ(cleanMessage("remote exception: server/session.cpp:120: failed: unknown op 'foo'"), "unknown op 'foo'");
  EXPECT_EQ(cleanMessage("remote exception: remote exception: add: bad"), "add: bad");
  EXPECT_EQ(cleanMessage("src/x.c++:7: overloaded: out of memory"), "out of memory");
  EXPECT_EQ(cleanMessage("remote exception: oops\ncontext: a.c++:1: b\ncontext: c.c++:2: d"), "oops");
  EXPECT_EQ(cleanMessage("remote exception: oops\nstack: 0x1 0x2"), "oops");
  // Prose with colons and numbers is left alone.
  EXPECT_EQ(cleanMessage("sum: dim 3: out of range for rank 2"), "sum: dim 3: out of range for rank 2");
  EXPECT_EQ(cleanMessage("listen on 127.0.0.1:7450: refused"), "listen on 127.0.0.1:7450: refused");
  EXPECT_EQ(cleanMessage(""), "unknown error");
}

TEST(Errors, CleansKjRequireDecorations) {
  // KJ_REQUIRE(cond, message) with a non-literal message.
  EXPECT_EQ(cleanMessage("remote exception: expected attr.isFloat(); op + \": attr 'f' must be a float\" = "
                         "scale: attr 'f' must be a float"),
            "scale: attr 'f' must be a float");
  EXPECT_EQ(cleanMessage("remote exception: expected n < limit; message = sum: too big"), "sum: too big");
  EXPECT_EQ(cleanMessage("x.c++:3: failed: expected ok; add: bad shape"), "add: bad shape");
  EXPECT_EQ(cleanMessage("remote exception: e.what() = matmul: no"), "matmul: no");
  // Prose that merely starts with "expected" or contains " = " stays.
  EXPECT_EQ(cleanMessage("expected 2 inputs (a, b); got 3"), "expected 2 inputs (a, b); got 3");
  EXPECT_EQ(cleanMessage("sum: dim 3 = out of range"), "sum: dim 3 = out of range");
}

TEST(Errors, DisconnectNamesTheAddress) {
  Error e =
      toError(kj::Exception(kj::Exception::Type::DISCONNECTED, "f", 1, kj::str("Peer disconnected.")), "127.0.0.1:9");
  EXPECT_EQ(e.kind(), Error::Kind::kDisconnected);
  EXPECT_STREQ(e.what(), "connection to tensord at 127.0.0.1:9 lost: Peer disconnected.");
  Error f = toError(kj::Exception(kj::Exception::Type::FAILED, "f", 1, kj::str("remote exception: bad")), "a:1");
  EXPECT_STREQ(f.what(), "bad");
}

}  // namespace
}  // namespace tensord::errors
