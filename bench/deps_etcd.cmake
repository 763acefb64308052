# ddp-bench etcd-rendezvous: real EtcdHandlers (ddp::rdzv over ddp::etcd_store).
target_link_libraries(ddp-bench PRIVATE ddp::rdzv ddp::etcd_store Boost::headers)
