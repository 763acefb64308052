# Every dependency comes from Debian packages (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(Boost 1.81 REQUIRED COMPONENTS system)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(SYSTEMD IMPORTED_TARGET libsystemd)
# hwloc (--numa_binding): optional; without it the flag is an error.
pkg_check_modules(HWLOC IMPORTED_TARGET hwloc)
if(DDP_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
endif()

# An AUTO|ON|OFF dependency: `option` ON requires `package`, AUTO takes it
# when found, OFF leaves it out. A macro, so that what find_package sets stays
# visible here.
macro(ddp_find_optional option package)
  if(${option} STREQUAL "ON")
    find_package(${package} REQUIRED)
  elseif(NOT ${option} STREQUAL "OFF")
    find_package(${package} QUIET)
  endif()
endmacro()

# Gloo (CPU collectives).
set(DDP_HAVE_GLOO OFF)
ddp_find_optional(DDP_WITH_GLOO Gloo)
if(NOT DDP_WITH_GLOO STREQUAL "OFF" AND TARGET gloo)
  set(DDP_HAVE_GLOO ON)
endif()

# NCCL (GPU collectives), found through the CUDA toolkit directories.
set(DDP_HAVE_NCCL OFF)
ddp_find_optional(DDP_WITH_NCCL NCCL)
if(NOT DDP_WITH_NCCL STREQUAL "OFF" AND NCCL_FOUND)
  set(DDP_HAVE_NCCL ON)
endif()
