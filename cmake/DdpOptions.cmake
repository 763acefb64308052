# User-facing build options. AUTO means "use it when found, build without it otherwise".
set(DDP_WITH_NCCL AUTO CACHE STRING "Build the NCCL backend (AUTO|ON|OFF)")
set_property(CACHE DDP_WITH_NCCL PROPERTY STRINGS AUTO ON OFF)
set(DDP_WITH_GLOO AUTO CACHE STRING "Build the Gloo backend (AUTO|ON|OFF)")
set_property(CACHE DDP_WITH_GLOO PROPERTY STRINGS AUTO ON OFF)
set(DDP_SANITIZE "" CACHE STRING "Sanitizer to build with: empty, address, thread or undefined")
option(DDP_BUILD_TESTS "Build the test suite" ON)

if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()
