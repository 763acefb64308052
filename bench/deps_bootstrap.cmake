# ddp-bench bootstrap: simulated torch ranks (raw TCPStore-protocol async
# clients on one io_context) against an in-process StoreServer or any server.
target_link_libraries(ddp-bench PRIVATE ddp::store_server Boost::headers)
