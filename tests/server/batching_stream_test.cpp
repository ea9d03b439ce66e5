#include "server/batching_stream.h"

#include <gtest/gtest.h>
#include <kj/async-io.h>

#include <string>
#include <vector>

namespace tensord::server {
namespace {

std::string text(kj::ArrayPtr<const kj::byte> bytes) { return std::string(bytes.asChars().begin(), bytes.size()); }

kj::ArrayPtr<const kj::byte> bytesOf(const std::string& s) {
  return kj::ArrayPtr<const kj::byte>(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}

// Reads exactly `n` bytes from `in`.
std::string readExactly(kj::AsyncInputStream& in, size_t n, kj::WaitScope& ws) {
  std::string out(n, '\0');
  size_t got = in.read(out.data(), n, n).wait(ws);
  out.resize(got);
  return out;
}

TEST(BatchingStreamTest, SmallWritesOfOnePassGoOutAsOneWrite) {
  auto io = kj::setupAsyncIo();
  auto pipe = io.provider->newTwoWayPipe();
  BatchingStream stream(*pipe.ends[0]);
  std::vector<std::string> messages;
  for (int i = 0; i < 20; ++i) messages.push_back("message " + std::to_string(i) + ";");
  std::string expected;
  kj::Vector<kj::Promise<void>> writes;
  for (const auto& m : messages) {
    writes.add(stream.write(m.data(), m.size()));
    expected += m;
  }
  for (auto& w : writes) w.wait(io.waitScope);
  EXPECT_EQ(readExactly(*pipe.ends[1], expected.size(), io.waitScope), expected);
  EXPECT_EQ(stream.innerWrites(), 1u);

  // A later pass is a new batch, written after the first.
  stream.write("tail", 4).wait(io.waitScope);
  EXPECT_EQ(readExactly(*pipe.ends[1], 4, io.waitScope), "tail");
  EXPECT_EQ(stream.innerWrites(), 2u);
}

TEST(BatchingStreamTest, LargeWriteGoesAfterTheBatchedBytes) {
  auto io = kj::setupAsyncIo();
  auto pipe = io.provider->newTwoWayPipe();
  BatchingStream stream(*pipe.ends[0]);
  std::string small = "header";
  std::string large(BatchingStream::kDirectWriteBytes * 3, 'x');
  for (size_t i = 0; i < large.size(); ++i) large[i] = char('a' + i % 26);
  auto first = stream.write(small.data(), small.size());
  kj::ArrayPtr<const kj::byte> pieces[] = {bytesOf(large)};
  auto second = stream.write(kj::arrayPtr(pieces, 1));
  auto reading = pipe.ends[1]->readAllBytes();
  first.wait(io.waitScope);
  second.wait(io.waitScope);
  stream.shutdownWrite();
  auto all = reading.wait(io.waitScope);
  EXPECT_EQ(text(all), small + large);
}

TEST(BatchingStreamTest, ShutdownWaitsForTheBatch) {
  auto io = kj::setupAsyncIo();
  auto pipe = io.provider->newTwoWayPipe();
  BatchingStream stream(*pipe.ends[0]);
  auto w = stream.write("last words", 10);
  stream.shutdownWrite();  // before the batch was written
  w.wait(io.waitScope);
  auto all = pipe.ends[1]->readAllBytes().wait(io.waitScope);
  EXPECT_EQ(text(all), "last words");
}

TEST(BatchingStreamTest, SmallReadsAreServedFromOneBuffer) {
  auto io = kj::setupAsyncIo();
  auto pipe = io.provider->newTwoWayPipe();
  BatchingStream stream(*pipe.ends[1]);
  std::string sent;
  for (int i = 0; i < 100; ++i) sent += "word" + std::to_string(i % 10) + "!";  // 600 bytes
  pipe.ends[0]->write(sent.data(), sent.size()).wait(io.waitScope);
  pipe.ends[0]->shutdownWrite();
  std::string received;
  char chunk[6];
  for (;;) {
    size_t n = stream.tryRead(chunk, 6, 6).wait(io.waitScope);
    received.append(chunk, n);
    if (n < 6) break;
  }
  EXPECT_EQ(received, sent);
  // End of stream: fewer than minBytes, then nothing.
  EXPECT_EQ(stream.tryRead(chunk, 1, 6).wait(io.waitScope), 0u);
}

TEST(BatchingStreamTest, LargeReadGoesStraightToTheCaller) {
  auto io = kj::setupAsyncIo();
  auto pipe = io.provider->newTwoWayPipe();
  BatchingStream stream(*pipe.ends[1]);
  std::string sent(BatchingStream::kReadBufferBytes * 2 + 100, '\0');
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = char(i * 7);
  auto writing = pipe.ends[0]->write(sent.data(), sent.size());
  std::string head(10, '\0');
  ASSERT_EQ(stream.read(head.data(), 10, 10).wait(io.waitScope), 10u);  // buffers what has arrived
  std::string rest(sent.size() - 10, '\0');
  ASSERT_EQ(stream.read(rest.data(), rest.size(), rest.size()).wait(io.waitScope), rest.size());
  writing.wait(io.waitScope);
  EXPECT_EQ(head + rest, sent);
}

TEST(BatchingStreamTest, WritersWaitWhileTheSocketIsFull) {
  auto io = kj::setupAsyncIo();
  auto pipe = io.provider->newTwoWayPipe();
  BatchingStream stream(*pipe.ends[0]);
  // Fill the socket with small batched writes until one stays unfinished.
  std::string piece(1000, 'p');
  std::string expected;
  kj::Maybe<kj::Promise<void>> blocked;
  for (int i = 0; i < 100000 && blocked == nullptr; ++i) {
    auto w = stream.write(piece.data(), piece.size());
    expected += piece;
    io.waitScope.poll();  // ends the pass: the batch is handed to the socket
    if (!w.poll(io.waitScope)) {
      blocked = kj::mv(w);
    } else {
      w.wait(io.waitScope);
    }
  }
  ASSERT_TRUE(blocked != nullptr) << "the socket never filled";
  // Still blocked after the loop ran: nobody reads.
  KJ_IF_MAYBE (b, blocked) {
    EXPECT_FALSE(b->poll(io.waitScope));
    auto reading = readExactly(*pipe.ends[1], expected.size(), io.waitScope);
    b->wait(io.waitScope);
    EXPECT_EQ(reading, expected);
  }
}

}  // namespace
}  // namespace tensord::server
