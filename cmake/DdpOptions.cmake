# User-facing build options. AUTO means "use it when found, build without it otherwise".
set(DDP_WITH_NCCL AUTO CACHE STRING "Build the NCCL backend (AUTO|ON|OFF)")
set_property(CACHE DDP_WITH_NCCL PROPERTY STRINGS AUTO ON OFF)
set(DDP_WITH_GLOO AUTO CACHE STRING "Build the Gloo backend (AUTO|ON|OFF)")
set_property(CACHE DDP_WITH_GLOO PROPERTY STRINGS AUTO ON OFF)
set(DDP_SANITIZE "" CACHE STRING
  "Sanitizers to build with: empty, address, thread, undefined or a list such as address,undefined")
# libFuzzer targets under tests/fuzz (label fuzz); needs clang. Every ddp target
# then gets coverage instrumentation, so combine with DDP_SANITIZE=address,undefined.
option(DDP_FUZZ "Build the libFuzzer targets (clang only)" OFF)
if(DDP_FUZZ AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "DDP_FUZZ=ON needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++ "
                      "-DCMAKE_C_COMPILER=clang; Debian: apt-get install clang libclang-rt-14-dev")
endif()
option(DDP_BUILD_TESTS "Build the test suite" ON)
# Warnings in ddp's own code (tests included) fail the build; headers of the
# libraries it uses are system headers, whose warnings the compiler keeps to
# itself. scripts/test.sh (CI) turns it on for the GCC build.
option(DDP_WERROR "Treat warnings in ddp's own code as errors" OFF)

if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()
# ddp-rendezvousd-failpoints: a test-only copy of the daemon whose persistence
# faults (short writes, ENOSPC, failing fsync/rename, crashes) are switched by
# $DDP_FAILPOINTS, for the recovery tests. Never installed; the shipped daemon
# has no way to arm them.
option(DDP_FAILPOINTS "Build the fault-injection daemon for the tests (with DDP_BUILD_TESTS)" ON)
