#include "server/metrics_http.h"

#include <spdlog/spdlog.h>

#include <string>

#include "server/metrics.h"

namespace tensord::server {

class MetricsServer::Service final : public kj::HttpService {
 public:
  Service(ServerState& state, const kj::HttpHeaderTable& table) : state_(state), table_(table) {}

  kj::Promise<void> request(kj::HttpMethod method, kj::StringPtr url, const kj::HttpHeaders& headers,
                            kj::AsyncInputStream& requestBody, Response& response) override {
    std::string_view path(url.cStr());
    path = path.substr(0, path.find('?'));
    if (path != "/metrics") return plain(response, 404, "Not Found", "not found: tensord serves only /metrics\n");
    if (method != kj::HttpMethod::GET) {
      kj::HttpHeaders allow(table_);
      allow.add("Allow", "GET");
      return send(response, 405, "Method Not Allowed", allow, "only GET is served here\n");
    }
    kj::HttpHeaders out(table_);
    // The text exposition format, version 0.0.4.
    out.set(kj::HttpHeaderId::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
    StatsSnapshot stats = takeSnapshot(state_);
    stats.kernels = state_.engine.kernelDispatches();
    return send(response, 200, "OK", out, renderPrometheus(stats));
  }

 private:
  kj::Promise<void> plain(Response& response, unsigned status, kj::StringPtr statusText, std::string body) {
    kj::HttpHeaders out(table_);
    out.set(kj::HttpHeaderId::CONTENT_TYPE, "text/plain; charset=utf-8");
    return send(response, status, statusText, out, std::move(body));
  }

  static kj::Promise<void> send(Response& response, unsigned status, kj::StringPtr statusText,
                                const kj::HttpHeaders& headers, std::string body) {
    auto text = kj::heapString(body.data(), body.size());
    auto stream = response.send(status, statusText, headers, uint64_t(text.size()));
    auto written = stream->write(text.begin(), text.size());
    return written.attach(kj::mv(stream), kj::mv(text));
  }

  ServerState& state_;
  const kj::HttpHeaderTable& table_;
};

MetricsServer::MetricsServer(ServerState& state, kj::Timer& timer, kj::Own<kj::ConnectionReceiver> receiver)
    : service_(kj::heap<Service>(state, headerTable_)),
      receiver_(kj::mv(receiver)),
      server_(timer, headerTable_, *service_),
      listening_(server_.listenHttp(*receiver_).eagerlyEvaluate([&state](kj::Exception&& e) {
        state.log.error("the metrics endpoint stopped accepting: {}", e.getDescription().cStr());
      })) {}

MetricsServer::~MetricsServer() = default;

}  // namespace tensord::server
