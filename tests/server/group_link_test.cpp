// The window a node link keeps for its GroupPeer.data calls (PeerLink):
// calls wait for room, answers make it, and the first failure fails every
// later call.

#include "server/group_link.h"

#include <gtest/gtest.h>
#include <kj/async.h>

#include <string>

namespace tensord::server {
namespace {

constexpr uint64_t kWindow = protocol::kStreamWindowBytes;

std::string errorOf(kj::Promise<void>& promise, kj::WaitScope& ws) {
  try {
    promise.wait(ws);
  } catch (const kj::Exception& e) {
    return e.getDescription().cStr();
  }
  return "";
}

TEST(PeerLinkWindow, CallsGoAtOnceBelowTheWindow) {
  kj::EventLoop loop;
  kj::WaitScope ws(loop);
  PeerLink link;
  link.dataInFlight = kWindow - 1;
  auto room = link.room();
  EXPECT_TRUE(room.poll(ws));
  EXPECT_EQ(errorOf(room, ws), "");
}

TEST(PeerLinkWindow, ACallWaitsUntilAnAnswerMakesRoom) {
  kj::EventLoop loop;
  kj::WaitScope ws(loop);
  PeerLink link;
  link.dataInFlight = kWindow + (1 << 20);  // the last call took it past the window
  auto room = link.room();
  EXPECT_FALSE(room.poll(ws));
  link.answered(1 << 20);  // back at the window: still full
  EXPECT_FALSE(room.poll(ws));
  link.answered(1 << 20);
  EXPECT_TRUE(room.poll(ws));
  EXPECT_EQ(errorOf(room, ws), "");
  EXPECT_EQ(link.dataInFlight, kWindow - (1 << 20));
}

TEST(PeerLinkWindow, TheFirstFailureFailsTheWaitingCallAndEveryLaterOne) {
  kj::EventLoop loop;
  kj::WaitScope ws(loop);
  PeerLink link;
  link.dataInFlight = kWindow;
  auto waiting = link.room();
  link.dataFailed(KJ_EXCEPTION(FAILED, "receiver: chunk 3 was refused"));
  link.dataFailed(KJ_EXCEPTION(FAILED, "a later failure"));
  EXPECT_EQ(errorOf(waiting, ws), "receiver: chunk 3 was refused");
  link.answered(kWindow);  // the window is free again, the link is not
  auto later = link.room();
  EXPECT_EQ(errorOf(later, ws), "receiver: chunk 3 was refused");
}

TEST(PeerLinkWindow, ClosingTheLinkFailsTheWaitingCall) {
  kj::EventLoop loop;
  kj::WaitScope ws(loop);
  auto link = kj::heap<PeerLink>();
  link->dataInFlight = kWindow;
  auto waiting = link->room();
  link = nullptr;
  EXPECT_EQ(errorOf(waiting, ws), "the link was closed");
}

}  // namespace
}  // namespace tensord::server
