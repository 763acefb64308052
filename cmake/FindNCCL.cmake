# FindNCCL: NCCL and the CUDA runtime from the CUDA toolkit directories.
# Defines NCCL_FOUND, NCCL_INCLUDE_DIR (with CUDAToolkit_INCLUDE_DIRS all the SDK
# uses: it loads the libraries at run time) and the imported target NCCL::nccl
# (which also carries CUDA::cudart) for programs that call NCCL directly, such as
# the GPU tests.
find_package(CUDAToolkit QUIET)
set(_nccl_hints $ENV{NCCL_HOME} $ENV{CUDA_HOME} /usr/local/cuda)
if(CUDAToolkit_FOUND)
  list(PREPEND _nccl_hints ${CUDAToolkit_LIBRARY_ROOT})
endif()
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl HINTS ${_nccl_hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib64 lib)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR CUDAToolkit_FOUND)
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES
    IMPORTED_LOCATION ${NCCL_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR}
    INTERFACE_LINK_LIBRARIES CUDA::cudart)
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
