# Precompiled headers for the LibTorch targets (CI's compile time: <ATen/ATen.h> of LibTorch 2.11
# costs ~7 s a translation unit on CI's machine, paid ~180 times without them).
# Two shared PCHs, each built once and reused (REUSE_FROM) by every target of its kind:
#   specbed_torch_pch       <ATen/ATen.h>, <ATen/Parallel.h>, grad mode: the LibTorch libraries
#                           and the CLI;
#   specbed_torch_test_pch  the same + GoogleTest/GoogleMock: test binaries that link a LibTorch
#                           library (specbed_add_test, cmake/SpecBedTest.cmake).
# SPECBED_PCH=OFF builds without them (every file then compiles from its own includes alone, which
# is how to check that a file includes what it uses).
# Checked by: every build; scripts/check_cuda_build builds the CUDA tree with them.
option(SPECBED_PCH "Precompile the LibTorch (and GoogleTest) headers shared by LibTorch targets" ON)

# The libraries that link LibTorch; a test that links one of them reuses the test PCH.
set(SPECBED_TORCH_LIBS specbed_kernels specbed_models specbed_engine specbed_methods
    specbed_trainers specbed_train specbed_train_core specbed_runner)

set(_specbed_pch_torch_headers
    "$<$<COMPILE_LANGUAGE:CXX>:<ATen/ATen.h$<ANGLE-R>>"
    "$<$<COMPILE_LANGUAGE:CXX>:<ATen/Parallel.h$<ANGLE-R>>"
    "$<$<COMPILE_LANGUAGE:CXX>:<ATen/core/grad_mode.h$<ANGLE-R>>")

# specbed_add_pch_target(<name> <libraries...>): an object library over an empty file whose only
# job is to compile the PCH with the given libraries' include paths.
function(specbed_add_pch_target name)
  set(anchor ${CMAKE_BINARY_DIR}/pch/${name}.cpp)
  if(NOT EXISTS ${anchor})
    file(WRITE ${anchor} "// The translation unit that builds ${name} (cmake/SpecBedPch.cmake).\n")
  endif()
  add_library(${name} OBJECT ${anchor})
  target_link_libraries(${name} PRIVATE ${ARGN})
  target_precompile_headers(${name} PRIVATE ${_specbed_pch_torch_headers})
endfunction()

if(SPECBED_PCH AND NOT SPECBED_NO_TORCH)
  specbed_add_pch_target(specbed_torch_pch ${TORCH_LIBRARIES})
endif()

# specbed_use_torch_pch(<target>): <target> reuses specbed_torch_pch (when SPECBED_PCH is on).
function(specbed_use_torch_pch target)
  if(TARGET specbed_torch_pch)
    target_precompile_headers(${target} REUSE_FROM specbed_torch_pch)
  endif()
endfunction()

# specbed_use_torch_test_pch(<target> <libraries...>): a test binary reuses specbed_torch_test_pch
# when it links one of SPECBED_TORCH_LIBS.
function(specbed_use_torch_test_pch target)
  if(NOT SPECBED_PCH OR SPECBED_NO_TORCH)
    return()
  endif()
  foreach(lib IN LISTS ARGN)
    if(lib IN_LIST SPECBED_TORCH_LIBS)
      if(NOT TARGET specbed_torch_test_pch)
        specbed_add_pch_target(specbed_torch_test_pch ${TORCH_LIBRARIES}
                               GTest::gtest GTest::gmock)
        target_compile_options(specbed_torch_test_pch PRIVATE ${SPECBED_TEST_OPT})
        target_precompile_headers(specbed_torch_test_pch PRIVATE
          "$<$<COMPILE_LANGUAGE:CXX>:<gtest/gtest.h$<ANGLE-R>>"
          "$<$<COMPILE_LANGUAGE:CXX>:<gmock/gmock.h$<ANGLE-R>>")
      endif()
      target_precompile_headers(${target} REUSE_FROM specbed_torch_test_pch)
      return()
    endif()
  endforeach()
endfunction()
