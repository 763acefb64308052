# ddp-bench rendezvous: simulated c10d agents (raw async clients on one
# io_context) against an in-process StoreServer or a daemon, and the echo
# floor they are compared with (echo_floor.cpp).
target_link_libraries(ddp-bench PRIVATE ddp::store ddp::store_server Boost::headers)
target_sources(ddp-bench PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/echo_floor.cpp)
