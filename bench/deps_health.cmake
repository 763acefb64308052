# ddp-bench health: the agent's HealthCheck (an internal header of the agent)
# against an in-process StoreServer.
target_link_libraries(ddp-bench PRIVATE ddp_agent_internal ddp::store_server)
