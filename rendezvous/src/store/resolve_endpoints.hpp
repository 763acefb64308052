// Where a store client (TcpStore, the torch proxy's connection upstream)
// connects to: host:port resolved on the caller's io_context. Private to the
// rendezvous libraries (ddp_store_internal); the public headers expose no Asio.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ddp::store {

using ResolvedFn = std::function<void(const boost::system::error_code& ec,
                                      std::vector<boost::asio::ip::tcp::endpoint> endpoints)>;

// Calls `done` on `resolver`'s executor with host:port's endpoints. A numeric
// address needs no resolver, whose first async_resolve starts a thread of its
// own (Asio runs getaddrinfo there, and joins it at shutdown).
void resolve_endpoints(boost::asio::ip::tcp::resolver& resolver, const std::string& host, std::uint16_t port,
                       ResolvedFn done);

}  // namespace ddp::store
