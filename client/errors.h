#pragma once
// Turns KJ / Cap'n Proto exceptions into tensord::Error. Internal.

#include <kj/exception.h>

#include <string>
#include <string_view>

#include "tensord/client.h"

namespace tensord::errors {

// The exception's kind mapped onto Error::Kind.
Error::Kind kindOf(const kj::Exception& e);

// The human part of an exception's description: drops Cap'n Proto's
// "remote exception: " prefixes, leading "file.c++:123: failed: " locations
// and the trailing "context: ..." / "stack: ..." lines.
std::string cleanMessage(std::string_view description);

// Error for `e`; a DISCONNECTED one says which daemon was lost.
Error toError(const kj::Exception& e, std::string_view address);

}  // namespace tensord::errors
