# A ccache launcher (scripts/build.sh, build_wheel.sh and test.sh pass
# -DCMAKE_<LANG>_COMPILER_LAUNCHER=ccache) runs with its base dir on the
# source tree in every compile, not only when a script exported
# CCACHE_BASEDIR: ccache then hashes a command line's paths relative to the
# build directory, so build/, build-wheel/ (the wheel's build, at the same
# depth) and a build started by hand (`ninja -C build`, `cmake --build`) share
# their objects. Before, a rebuild by hand stored its objects under absolute
# paths, and the wheel's build, run with the base dir, missed them.
foreach(lang C CXX)
  set(launcher "${CMAKE_${lang}_COMPILER_LAUNCHER}")
  list(LENGTH launcher words)
  get_filename_component(launcher_name "${launcher}" NAME)
  if(words EQUAL 1 AND launcher_name STREQUAL "ccache")
    find_program(DDP_ENV_PROGRAM env REQUIRED)
    mark_as_advanced(DDP_ENV_PROGRAM)
    set(CMAKE_${lang}_COMPILER_LAUNCHER ${DDP_ENV_PROGRAM} CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} ${launcher})
  endif()
endforeach()
