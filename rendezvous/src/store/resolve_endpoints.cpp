#include "resolve_endpoints.hpp"

#include <boost/asio/post.hpp>

namespace ddp::store {

namespace asio = boost::asio;
using asio::ip::tcp;

void resolve_endpoints(tcp::resolver& resolver, const std::string& host, std::uint16_t port,
                       ResolvedFn done) {
  boost::system::error_code numeric;
  const auto address = asio::ip::make_address(host, numeric);
  if (!numeric) {
    asio::post(resolver.get_executor(),
               [done = std::move(done), ep = tcp::endpoint(address, port)] { done({}, {ep}); });
    return;
  }
  resolver.async_resolve(host, std::to_string(port),
                         [done = std::move(done)](const boost::system::error_code& ec,
                                                  const tcp::resolver::results_type& results) {
                           std::vector<tcp::endpoint> endpoints;
                           for (const auto& r : results) endpoints.push_back(r.endpoint());
                           done(ec, std::move(endpoints));
                         });
}

}  // namespace ddp::store
