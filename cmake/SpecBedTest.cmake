# specbed_add_test(NAME <name> SOURCES <files...> LIBS <targets...> [SERIAL])
# SERIAL: every test of the binary is RUN_SERIAL (timing-sensitive tests).
# A binary that links a LibTorch library reuses the shared test PCH (cmake/SpecBedPch.cmake).
# One GoogleTest binary; every TEST becomes a ctest test. Keep binaries that do not need LibTorch
# free of it: each LibTorch process start costs ~0.4 s.
function(specbed_add_test)
  cmake_parse_arguments(ARG "SERIAL" "NAME" "SOURCES;LIBS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main Threads::Threads)
  specbed_use_torch_test_pch(${ARG_NAME} ${ARG_LIBS})
  target_compile_definitions(${ARG_NAME} PRIVATE
    SPECBED_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    SPECBED_TEST_TMPDIR="${CMAKE_BINARY_DIR}/test_tmp")
  set(serial "")
  if(ARG_SERIAL)
    set(serial RUN_SERIAL TRUE)
  endif()
  gtest_discover_tests(${ARG_NAME} DISCOVERY_TIMEOUT 120
    PROPERTIES ENVIRONMENT "SPECBED_HOME=${PROJECT_SOURCE_DIR}" ${serial})
endfunction()
