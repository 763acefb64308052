# One short block at the end of configure saying what will be built.
message(STATUS "ddp ${PROJECT_VERSION} configuration:")
message(STATUS "  build type     : ${CMAKE_BUILD_TYPE}")
message(STATUS "  gloo backend   : ${DDP_HAVE_GLOO} (DDP_WITH_GLOO=${DDP_WITH_GLOO})")
message(STATUS "  nccl backend   : ${DDP_HAVE_NCCL} (DDP_WITH_NCCL=${DDP_WITH_NCCL})")
message(STATUS "  libsystemd     : ${SYSTEMD_FOUND}")
message(STATUS "  sanitizer      : ${DDP_SANITIZE}")
message(STATUS "  tests          : ${DDP_BUILD_TESTS}")
