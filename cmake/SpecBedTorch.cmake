# Finds LibTorch (PyTorch >= 2.5: the pip wheel's or the libtorch archive's; Debian's 1.13 is not
# supported) and defines what every LibTorch target links: TORCH_LIBRARIES, SPECBED_TORCH_VERSION,
# SPECBED_TORCH_ROOT, SPECBED_TORCH_INCLUDE_DIRS (headers alone).
# Where it looks, first found of:
#   1. Torch_DIR (cache or environment): <root>/share/cmake/Torch of a wheel or libtorch archive,
#      or a CMAKE_PREFIX_PATH entry holding Torch/ or share/cmake/Torch/ (torch.utils.cmake_prefix_path);
#   2. the project's own environment, .venv/ (scripts/deps.sh installs PyPI's torch 2.11.0 there);
#   3. the torch package of `python3` (pip install torch), through torch.utils.cmake_prefix_path.
# Every library links the imported target specbed_torch (TORCH_LIBRARIES), i.e. libtorch_cpu +
# libc10 and the headers, in both builds: a CUDA wheel's CMake package is not needed for them, and
# no CPU process loads libtorch_cuda (~0.13-0.3 s of start and ~350 MB of memory less per test
# process).
# CUDA build (SPECBED_CUDA=ON): find_package(Torch) with its CUDA setup as well; its libraries
# (SPECBED_TORCH_CUDA_LIBRARIES) go to the CUDA backend alone, which specbed_link_cuda() links into
# the CLI and the test binaries holding *Cuda tests. So the CUDA build is the CPU build plus the
# .cu kernels, one glue file and those links.
# Checked by: every build (CI builds with SPECBED_CUDA=ON; scripts/check_cuda_build checks the links).
set(_specbed_torch_dir "")
if(DEFINED Torch_DIR AND EXISTS "${Torch_DIR}/TorchConfig.cmake")
  set(_specbed_torch_dir "${Torch_DIR}")
elseif(NOT "$ENV{Torch_DIR}" STREQUAL "" AND EXISTS "$ENV{Torch_DIR}/TorchConfig.cmake")
  set(_specbed_torch_dir "$ENV{Torch_DIR}")
else()
  foreach(_prefix IN LISTS CMAKE_PREFIX_PATH)
    foreach(_sub Torch share/cmake/Torch)
      if(NOT _specbed_torch_dir AND EXISTS "${_prefix}/${_sub}/TorchConfig.cmake")
        get_filename_component(_specbed_torch_dir "${_prefix}/${_sub}" ABSOLUTE)
      endif()
    endforeach()
  endforeach()
endif()
if(NOT _specbed_torch_dir)
  file(GLOB _specbed_venv_torch
       "${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/torch/share/cmake/Torch")
  if(_specbed_venv_torch)
    list(GET _specbed_venv_torch 0 _specbed_torch_dir)
  else()
    find_program(SPECBED_PYTHON3 python3)
    if(SPECBED_PYTHON3)
      execute_process(COMMAND ${SPECBED_PYTHON3} -c
                              "import torch.utils; print(torch.utils.cmake_prefix_path)"
                      OUTPUT_VARIABLE _specbed_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                      RESULT_VARIABLE _specbed_py_rc ERROR_QUIET TIMEOUT 120)
      if(_specbed_py_rc EQUAL 0 AND EXISTS "${_specbed_prefix}/Torch/TorchConfig.cmake")
        set(_specbed_torch_dir "${_specbed_prefix}/Torch")
      endif()
    endif()
  endif()
endif()
if(NOT _specbed_torch_dir)
  message(FATAL_ERROR
    "LibTorch not found. Run scripts/deps.sh (installs PyPI's torch 2.11.0 into .venv/), or pass "
    "-DTorch_DIR=<libtorch>/share/cmake/Torch (a libtorch archive, or a pip install's "
    "site-packages/torch/share/cmake/Torch).")
endif()
set(Torch_DIR "${_specbed_torch_dir}" CACHE PATH "LibTorch's CMake package (<root>/share/cmake/Torch)"
    FORCE)
get_filename_component(SPECBED_TORCH_ROOT "${Torch_DIR}/../../.." ABSOLUTE)
# Headers only, for a LibTorch-free binary that includes a header naming ATen types.
set(SPECBED_TORCH_INCLUDE_DIRS "${SPECBED_TORCH_ROOT}/include"
    "${SPECBED_TORCH_ROOT}/include/torch/csrc/api/include")

# The version, from the headers (torch/version.h moved to torch/headeronly/ in 2.9).
set(SPECBED_TORCH_VERSION "")
foreach(_h include/torch/headeronly/version.h include/torch/csrc/api/include/torch/version.h)
  if(NOT SPECBED_TORCH_VERSION AND EXISTS "${SPECBED_TORCH_ROOT}/${_h}")
    file(READ "${SPECBED_TORCH_ROOT}/${_h}" _specbed_version_text)
    set(_parts "")
    foreach(_part MAJOR MINOR PATCH)
      if(_specbed_version_text MATCHES "#define TORCH_VERSION_${_part} ([0-9]+)")
        list(APPEND _parts ${CMAKE_MATCH_1})
      endif()
    endforeach()
    list(LENGTH _parts _n)
    if(_n EQUAL 3)
      string(JOIN "." SPECBED_TORCH_VERSION ${_parts})
    endif()
  endif()
endforeach()
if(NOT SPECBED_TORCH_VERSION)
  message(FATAL_ERROR "LibTorch at ${SPECBED_TORCH_ROOT}: no TORCH_VERSION_MAJOR/MINOR/PATCH in "
                      "include/torch/version.h (expected a libtorch archive or a pip torch package)")
endif()
if(SPECBED_TORCH_VERSION VERSION_LESS 2.5)
  message(FATAL_ERROR "LibTorch ${SPECBED_TORCH_VERSION} at ${SPECBED_TORCH_ROOT}: SpecBed needs "
                      ">= 2.5 (scripts/deps.sh installs 2.11.0, the GPU machines' version)")
endif()

# Every library and test links the CPU half: libtorch_cpu + libc10 and the headers.
set(_specbed_libs "${SPECBED_TORCH_ROOT}/lib/libtorch_cpu.so" "${SPECBED_TORCH_ROOT}/lib/libc10.so")
foreach(_lib IN LISTS _specbed_libs)
  if(NOT EXISTS "${_lib}")
    message(FATAL_ERROR "LibTorch at ${SPECBED_TORCH_ROOT}: ${_lib} is missing")
  endif()
endforeach()
add_library(specbed_torch INTERFACE IMPORTED)
set_target_properties(specbed_torch PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${SPECBED_TORCH_INCLUDE_DIRS}"
  INTERFACE_LINK_LIBRARIES "${_specbed_libs}")

if(SPECBED_CUDA)
  # LibTorch's CMake package ignores CMAKE_CUDA_ARCHITECTURES and adds -gencode flags for
  # TORCH_CUDA_ARCH_LIST to CMAKE_CUDA_FLAGS, by default every architecture it supports (11 in
  # 2.11): follow CMAKE_CUDA_ARCHITECTURES ("90" -> "9.0") unless the user set the list. With
  # "native" LibTorch detects the visible GPU itself.
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND "$ENV{TORCH_CUDA_ARCH_LIST}" STREQUAL "" AND
     CMAKE_CUDA_ARCHITECTURES MATCHES "^[0-9]+$")
    string(REGEX REPLACE "([0-9])$" ".\\1" TORCH_CUDA_ARCH_LIST "${CMAKE_CUDA_ARCHITECTURES}")
  endif()
  find_package(Torch REQUIRED)
  if(NOT (TARGET torch_cuda OR TARGET c10_cuda OR CAFFE2_USE_CUDA))
    message(FATAL_ERROR "SPECBED_CUDA=ON needs a CUDA build of LibTorch; the one at "
                        "${SPECBED_TORCH_ROOT} has no CUDA backend (PyPI's torch 2.11.0 is "
                        "+cu130: scripts/deps.sh)")
  endif()
  # Only the CUDA backend (specbed_cuda, kernels/CMakeLists.txt) links these (libtorch_cuda,
  # libc10_cuda, the CUDA runtime), and only binaries that link it load them.
  set(SPECBED_TORCH_CUDA_LIBRARIES ${TORCH_LIBRARIES})
endif()
set(TORCH_LIBRARIES specbed_torch)

# specbed_link_cuda(<target>): with SPECBED_CUDA=ON, <target> (an executable) gets SpecBed's CUDA
# kernels and LibTorch's CUDA backend (the object library specbed_cuda, kernels/cuda_backend.h);
# a no-op otherwise.
function(specbed_link_cuda target)
  if(TARGET specbed_cuda)
    target_link_libraries(${target} PRIVATE specbed_cuda)
  endif()
endfunction()
message(STATUS "LibTorch ${SPECBED_TORCH_VERSION} at ${SPECBED_TORCH_ROOT}"
               " (${CMAKE_CURRENT_LIST_FILE}; CUDA: ${SPECBED_CUDA})")
