# ddp-bench store: TcpStore clients against an in-process StoreServer or a daemon.
target_link_libraries(ddp-bench PRIVATE ddp::store ddp::store_server)
