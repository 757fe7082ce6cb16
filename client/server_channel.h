// A channel to a URL's first server, for the calls made before (or without) a MOUNT:
// EXPORTS and CLIENTS (client/admin.h). Internal to client/.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "client/client.h"
#include "client/url.h"
#include "rpc/client_channel.h"

namespace odafs {

// Connects to url.server with the options' timeout, credential and TLS (as a mount
// would). EINVAL when the TLS files do not load; the connection's errno when it fails.
Result<std::shared_ptr<rpc::Channel>> server_channel(const Url& url, const MountOptions& options);

}  // namespace odafs
