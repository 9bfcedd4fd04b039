# specbed_add_test(NAME <name> SOURCES <files...> LIBS <targets...> [SERIAL])
# SERIAL: every test of the binary is RUN_SERIAL (timing-sensitive tests).
# A binary that links a LibTorch library reuses the shared test PCH (cmake/SpecBedPch.cmake).
# One GoogleTest binary; every TEST becomes a ctest test. Keep binaries that do not need LibTorch
# free of it: each LibTorch process start costs ~0.4 s.
# The environment of every test: SPECBED_HOME (the shipped files), and one ATen/OpenMP/MKL thread
# unless the test sets its own width (PyPI's LibTorch defaults to every core, which under
# `ctest -j 2` on two cores oversubscribes them; Debian's 1.13 defaulted to one thread here).
# SPECBED_TEST_ENV is that environment as a list, for tests added with add_test; the GoogleTest
# tests get it through specbed_add_test below.
set(SPECBED_TEST_ENV "SPECBED_HOME=${PROJECT_SOURCE_DIR};OMP_NUM_THREADS=1")

# With SPECBED_CUDA=ON, a LibTorch test binary whose sources hold a *Cuda test suite
# (TEST(...Cuda..., ...), the pattern scripts/check_cuda_build greps) links the CUDA backend
# (specbed_link_cuda); every other test binary loads libtorch_cpu alone.
function(specbed_link_cuda_if_cuda_tests target)
  if(NOT TARGET specbed_cuda)
    return()
  endif()
  get_target_property(libs ${target} LINK_LIBRARIES)
  set(uses_torch OFF)
  foreach(lib IN LISTS libs)
    if(lib IN_LIST SPECBED_TORCH_LIBS)
      set(uses_torch ON)
    endif()
  endforeach()
  if(NOT uses_torch)
    return()
  endif()
  foreach(source IN LISTS ARGN)
    file(STRINGS ${CMAKE_CURRENT_SOURCE_DIR}/${source} cuda_tests
         REGEX "^TEST(_F|_P)?\\([A-Za-z0-9_]*Cuda[A-Za-z0-9_]*,")
    if(cuda_tests)
      specbed_link_cuda(${target})
      return()
    endif()
  endforeach()
endfunction()

function(specbed_add_test)
  cmake_parse_arguments(ARG "SERIAL" "NAME" "SOURCES;LIBS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main Threads::Threads)
  specbed_use_torch_test_pch(${ARG_NAME} ${ARG_LIBS})
  specbed_link_cuda_if_cuda_tests(${ARG_NAME} ${ARG_SOURCES})
  # Test code compiles at SPECBED_TEST_OPT (-O1 by default: ~35% less compile time than -O3, and
  # the work a test times or repeats runs in the libraries, which keep the build type's flags).
  target_compile_options(${ARG_NAME} PRIVATE ${SPECBED_TEST_OPT})
  target_compile_definitions(${ARG_NAME} PRIVATE
    SPECBED_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    SPECBED_TEST_TMPDIR="${CMAKE_BINARY_DIR}/test_tmp")
  set(serial "")
  if(ARG_SERIAL)
    set(serial RUN_SERIAL TRUE)
  endif()
  # One value per property: gtest_discover_tests passes each property value through several list
  # expansions, which split a list however it is escaped, so ENVIRONMENT "A;B" arrived as A alone
  # (until 2026-12-04 every LibTorch test ran with OpenMP at the machine's width: under ctest -j 2,
  # four spinning threads on two cores, tests up to 10x slower). OMP_NUM_THREADS therefore comes
  # through ENVIRONMENT_MODIFICATION; tests/common/test_environment_test.cpp checks both arrive.
  gtest_discover_tests(${ARG_NAME} DISCOVERY_TIMEOUT 120
    PROPERTIES ENVIRONMENT "SPECBED_HOME=${PROJECT_SOURCE_DIR}"
               ENVIRONMENT_MODIFICATION "OMP_NUM_THREADS=set:1" ${serial})
endfunction()
