#pragma once
// Chunked bulk transfers: upload through Session.upload's TensorWriter and
// download through a local ByteSink. Internal.

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "client/connection.h"
#include "client/receive_worker.h"

namespace tensord::detail {

// Bytes per upload chunk: one `-> stream` write, well under the daemon's
// per-message limit; the RPC flow controller bounds how many are in flight.
constexpr size_t kChunkBytes = size_t(1) << 20;
// The first chunk's worth goes in smaller writes: the daemon copies each
// write into its staging memory as it arrives, so it copies one while the
// next is still on its way instead of the whole first chunk after it.
constexpr size_t kLeadingChunkBytes = kChunkBytes / 4;

// Streams `data` to the daemon (blocking, flow-controlled) and returns the
// tensor of the still-pipelined commit. `data` may be released on return.
Tensor upload(const std::shared_ptr<Connection>& conn, DType dtype, const Shape& shape, std::span<const std::byte> data,
              const Progress& progress);

// Reads the whole tensor into `landing`, its info and its bytes in one round
// trip, and returns the info. `expect` is called with the info before the
// bytes are counted against it (normally before the first byte lands): it
// sizes the destination or throws, which abandons the download. Bytes that
// arrive before the info only land where `landing` has room. Once this
// returns or throws nothing touches `landing` any more.
TensorInfo download(Tensor::Impl& impl, Landing& landing, const std::function<void(const TensorInfo&)>& expect,
                    const Progress& progress);

// download() into a new vector of the tensor's size: its info and its bytes.
std::pair<TensorInfo, std::vector<std::byte>> download(Tensor::Impl& impl, const Progress& progress);

}  // namespace tensord::detail
