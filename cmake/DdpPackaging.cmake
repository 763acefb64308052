# The ddp CMake package (find_package(ddp) -> ddp::sdk): the libraries of the
# export set ddpTargets install themselves in their own directories.
set(DDP_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ddp)
install(EXPORT ddpTargets NAMESPACE ddp:: DESTINATION ${DDP_CMAKE_DIR})
include(CMakePackageConfigHelpers)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ddpConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ddpConfig.cmake INSTALL_DESTINATION ${DDP_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ddpConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ddpConfig.cmake ${PROJECT_BINARY_DIR}/ddpConfigVersion.cmake
  DESTINATION ${DDP_CMAKE_DIR})

# `cpack -G DEB` from the build dir: one package "ddprun" with the binaries, the
# systemd units, the SDK headers/libraries and the ddp CMake package. Configure
# with -DCMAKE_INSTALL_PREFIX=/usr so the units' ExecStart paths match the
# package layout (they are generated from the configure-time prefix).
set(CPACK_PACKAGE_NAME ddprun)
set(CPACK_PACKAGE_VENDOR "ddprun developers")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Elastic launcher (torchrun-compatible), rendezvous daemon and worker SDK")
set(CPACK_PACKAGE_CONTACT "ddprun maintainers <ddprun@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
# Runtime library dependencies (libspdlog, libfmt, libgloo, libsystemd, ...)
# computed from the binaries by dpkg-shlibdeps.
find_program(DDP_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(DDP_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libspdlog1.10, libsystemd0, libstdc++6")
endif()
include(CPack)
