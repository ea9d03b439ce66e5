# The floor of tensord's stack for the benchmark: a trivial Cap'n Proto
# interface served over loopback TCP, with no daemon, device or registry
# behind it. Not part of tensord's protocol.

@0xdf4fb7da7d6eb826;

$import "/capnp/c++.capnp".namespace("tensord::bench::proto");

interface Echo {
  ping @0 (value :UInt64) -> (value :UInt64);

  upload @1 () -> (sink :Sink);
  # A sink on the server that counts what it is sent (bytes to the server).

  download @2 (sink :Sink, bytes :UInt64, chunkBytes :UInt32) -> ();
  # The server streams `bytes` into the client's sink in chunks, then calls
  # sink.done(); returns after done() returned.

  chain @3 (input :Link) -> (output :Link);
  # A fresh link, once `input` (when set) has resolved to one of this
  # server's links: the floor of a call whose input is the pipelined result
  # of the call before it, as tensord's ops on each other's outputs.
}

interface Link {}

interface Sink {
  write @0 (data :Data) -> stream;
  done @1 () -> (bytes :UInt64);
}
