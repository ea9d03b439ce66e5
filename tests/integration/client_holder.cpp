// tensord_client_holder: a helper for the disconnect test. Connects to the
// daemon at argv[1] with token argv[2], uploads a few tensors, computes one,
// saves one under the name argv[3], prints "ready" and then waits until it is
// killed, holding every tensor. Killing it is a client disconnecting abruptly.

#include <unistd.h>

#include <cstdio>
#include <vector>

#include "tensord/client.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s HOST:PORT TOKEN NAME\n", argv[0]);
    return 2;
  }
  try {
    tensord::Client client({.address = argv[1], .token = argv[2]});
    std::vector<float> data(256 * 1024, 1.5f);  // 1 MiB
    tensord::Tensor a = client.upload({256, 1024}, data);
    tensord::Tensor b = client.upload({256, 1024}, data);
    tensord::Tensor c = a + b;
    tensord::Tensor named = client.upload({1024}, std::vector<float>(1024, 2.5f));
    named.save(argv[3]);
    c.wait();
    std::printf("ready\n");
    std::fflush(stdout);
    for (;;) pause();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "client_holder: %s\n", e.what());
    return 1;
  }
}
