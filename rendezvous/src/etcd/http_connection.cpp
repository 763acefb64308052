#include "http_connection.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>

#include "beast_session.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/installed_file.hpp"

namespace ddp::store::etcd {

namespace {

// The TLS plugin's table, loaded on the first https store (or TLS probe):
// ddprun links no OpenSSL. Throws ConfigError naming the plugin.
const EtcdTlsPlugin& tls_plugin() {
  static const EtcdTlsPlugin* const plugin = [] {
    const std::string path =
        find_installed(std::filesystem::path(DDP_ETCD_TLS_PLUGIN_DIR) / kEtcdTlsPluginFile,
                       DDP_ETCD_TLS_PLUGIN_INSTALL_PATH, R_OK);
    if (path.empty()) {
      throw ConfigError(
          std::string("an https etcd endpoint (--rdzv_endpoint, etcd_cacert/etcd_cert/etcd_key) needs ") +
          kEtcdTlsPluginFile + ", found neither in " + DDP_ETCD_TLS_PLUGIN_DIR +
          "/ under the program's prefix nor at " + DDP_ETCD_TLS_PLUGIN_INSTALL_PATH + "; reinstall ddprun");
    }
    // A file cut short would be mapped and kill the program with SIGBUS.
    if (const auto damaged = elf_file_problem(path); !damaged.empty()) {
      throw ConfigError("an https etcd endpoint (--rdzv_endpoint, etcd_cacert/etcd_cert/etcd_key) needs " +
                        path + ", which " + damaged + "; reinstall ddprun");
    }
    void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = ::dlerror();
      throw ConfigError("an https etcd endpoint (--rdzv_endpoint, etcd_cacert/etcd_cert/etcd_key) needs " +
                        path + ", which cannot be loaded: " + (why != nullptr ? why : "unknown error") +
                        " (install OpenSSL 3, or reinstall ddprun)");
    }
    auto* entry = reinterpret_cast<EtcdTlsPluginFn*>(::dlsym(lib, kEtcdTlsSymbol));
    if (entry == nullptr) throw ConfigError(path + " has no " + kEtcdTlsSymbol + "; reinstall ddprun");
    return entry();
  }();  // a failed load throws, and is tried again next time
  return *plugin;
}

}  // namespace

std::shared_ptr<TlsContext> create_tls_context(const EtcdStoreOptions& options) {
  return tls_plugin().create_context(options);
}

HttpConnection::HttpConnection(Endpoint endpoint, std::shared_ptr<TlsContext> tls)
    : endpoint_(std::move(endpoint)) {
  if (tls) {
    impl_ = tls_plugin().make_session(endpoint_, std::move(tls));
  } else {
    using Plain = BeastSession<boost::beast::tcp_stream>;
    impl_ = std::make_unique<Plain>(
        endpoint_,
        [](boost::asio::io_context& ioc, std::optional<boost::beast::tcp_stream>& s) { s.emplace(ioc); },
        nullptr);
  }
}

HttpConnection::~HttpConnection() = default;

void HttpConnection::connect(Deadline deadline) { impl_->connect(deadline); }

HttpReply HttpConnection::post(const std::string& target, const std::string& body, Deadline deadline) {
  return impl_->post(target, body, deadline);
}

int HttpConnection::open_stream(const std::string& target, const std::string& body, Deadline deadline) {
  return impl_->open_stream(target, body, deadline);
}

std::string HttpConnection::read_line() { return impl_->read_line(); }

void HttpConnection::interrupt() { impl_->interrupt(); }

bool speaks_tls(const Endpoint& endpoint, Deadline deadline) {
  std::shared_ptr<TlsContext> probe;
  try {
    probe = tls_plugin().probe_context();
  } catch (const ConfigError&) {
    return false;  // no TLS here to tell: the caller reports the endpoint's own failure
  }
  HttpConnection conn(endpoint, probe);
  try {
    conn.connect(deadline);
    return true;
  } catch (const EndpointFailure&) {
    return false;
  }
}

}  // namespace ddp::store::etcd
