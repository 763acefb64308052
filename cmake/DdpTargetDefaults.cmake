# Settings every ddp target gets. Target-scoped on purpose: nothing here leaks
# into a consumer of the installed SDK.
function(ddp_target_defaults target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF POSITION_INDEPENDENT_CODE ON)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow)
  if(DDP_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(DDP_SANITIZE)
    # No recovery: a sanitizer report aborts the process, so a test cannot pass over it.
    target_compile_options(${target} PRIVATE -fsanitize=${DDP_SANITIZE} -fno-sanitize-recover=all
                                             -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=${DDP_SANITIZE})
  endif()
  if(DDP_FUZZ)
    # Coverage feedback for libFuzzer in every library a fuzz target links.
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link)
    target_link_options(${target} PRIVATE -fsanitize=fuzzer-no-link)
  endif()
endfunction()

# A plugin ddprun loads with dlopen only when a flag needs it (hwloc for
# --numa_binding, OpenSSL for an https etcd): a MODULE with
# ddp_target_defaults, in <build>/${DDP_PLUGIN_DIR} as once installed, and
# installed there. No program exports anything to a
# plugin, so every symbol must resolve at link time; not under a sanitizer,
# whose runtime a sanitized module leaves to the program that loads it.
function(ddp_add_plugin target)
  add_library(${target} MODULE ${ARGN})
  ddp_target_defaults(${target})
  if(NOT DDP_SANITIZE)
    target_link_options(${target} PRIVATE -Wl,--no-undefined)
  endif()
  set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/${DDP_PLUGIN_DIR})
  install(TARGETS ${target} LIBRARY DESTINATION ${DDP_PLUGIN_DIR})
endfunction()
