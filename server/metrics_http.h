#pragma once
// MetricsServer: the Prometheus endpoint. Plain HTTP on its own listening
// socket (config `metrics`), served by KJ's HTTP server on the daemon's
// event loop: GET /metrics answers the counters of Metrics in the text
// exposition format; other paths get 404, other methods 405. A scrape reads
// the counters where they live, so serving one costs the request path
// nothing.
//
// Threads: the event-loop thread only. ServerState must outlive it.

#include <kj/async-io.h>
#include <kj/compat/http.h>

#include "server/server_state.h"

namespace tensord::server {

class MetricsServer {
 public:
  MetricsServer(ServerState& state, kj::Timer& timer, kj::Own<kj::ConnectionReceiver> receiver);
  ~MetricsServer();
  KJ_DISALLOW_COPY(MetricsServer);

  uint16_t port() { return uint16_t(receiver_->getPort()); }

 private:
  class Service;

  kj::HttpHeaderTable headerTable_;
  kj::Own<Service> service_;
  kj::Own<kj::ConnectionReceiver> receiver_;
  kj::HttpServer server_;
  kj::Promise<void> listening_;
};

}  // namespace tensord::server
