// Sockets on 127.0.0.1 for what a test stands up itself: a proxy between a
// client and a server, a stand-in peer, a port held busy.
#pragma once

namespace ddp::test {

// A TCP socket listening on 127.0.0.1 on a port the kernel picked (close-on-exec),
// closed on destruction. Throws std::runtime_error when it cannot listen.
class LoopbackListener {
 public:
  explicit LoopbackListener(int backlog = 16);
  ~LoopbackListener();
  LoopbackListener(const LoopbackListener&) = delete;
  LoopbackListener& operator=(const LoopbackListener&) = delete;
  int fd() const { return fd_; }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A TCP connection to 127.0.0.1:`port` (close-on-exec); -1 when it fails.
int connect_loopback(int port);

}  // namespace ddp::test
