# ddp-bench allreduce: the SDK's Gloo all-reduce against raw Gloo in the same
# processes, plus the Reducer overlap measurement with ddp-example-train.
target_link_libraries(ddp-bench PRIVATE ddp::sdk ddp::store ddp::store_server)
if(DDP_HAVE_GLOO)
  target_link_libraries(ddp-bench PRIVATE gloo)
  target_compile_definitions(ddp-bench PRIVATE DDP_BENCH_HAVE_GLOO=1)
endif()
add_dependencies(ddp-bench ddp-example-train)
