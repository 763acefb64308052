# ddp-bench rendezvous: simulated c10d agents (raw async clients on one
# io_context) against an in-process StoreServer or a daemon.
target_link_libraries(ddp-bench PRIVATE ddp::store ddp::store_server Boost::headers)
