#pragma once
// Chunked bulk transfers: upload through Session.upload's TensorWriter and
// download through a local ByteSink. Internal.

#include <cstddef>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "client/connection.h"

namespace tensord::detail {

// Bytes per upload chunk: one `-> stream` write, well under the daemon's
// per-message limit; the RPC flow controller bounds how many are in flight.
constexpr size_t kChunkBytes = size_t(1) << 20;

// Streams `data` to the daemon (blocking, flow-controlled) and returns the
// tensor of the still-pipelined commit. `data` may be released on return.
Tensor upload(const std::shared_ptr<Connection>& conn, DType dtype, const Shape& shape, std::span<const std::byte> data,
              const Progress& progress);

// Reads the whole tensor: its info and its bytes, in one round trip.
std::pair<TensorInfo, std::vector<std::byte>> download(Tensor::Impl& impl, const Progress& progress);

}  // namespace tensord::detail
